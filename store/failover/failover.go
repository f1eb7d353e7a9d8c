// Package failover wraps a shared store (Redis) with a defined behaviour for
// when it cannot be reached. Each limit chooses (store.Spec.OnStoreError,
// from the policy's on_store_error; else the wrapper's default):
//
//   - fail_open: the request is admitted by that limit;
//   - fail_closed: the request is refused with an error matching
//     store.ErrUnavailable (the service answers 503);
//   - local: the limit is enforced by in-process buckets (a memstore) with
//     its budget divided by the configured number of instances, so that
//     together the instances stay within the shared budget (the bound is
//     docs/behaviour.md section 5.2's; see Store.Take).
//
// A request needing several limits is refused if any of them fails closed
// or is refused locally; fail-open limits admit.
//
// Every call to the primary is bounded by Config.Timeout: it gets a context
// with that deadline, and the wrapper stops waiting for it at the deadline
// (whether or not the primary honours it) and answers as for a failure. The
// first call that fails or times out opens the circuit: the wrapper sets
// the sluice_store_degraded gauge, logs (at most Burst records, then Rate a
// second: internal/ratelog), and sends no request's call to the primary
// while degraded. A primary that can be pinged (redisstore, lease over it)
// is probed in the background, one Ping per probe interval (250 ms), each
// bounded by the timeout; the first that answers hands the local buckets'
// levels back to it (Store.Take) and closes the circuit, without a
// restart. A primary that cannot be pinged is tried by one request's call
// per probe interval instead. Budgets admitted fail_open are not charged
// to the shared store afterwards.
package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// Modes of OnStoreError (store's).
const (
	FailOpen   = store.FailOpen
	FailClosed = store.FailClosed
	Local      = store.Local
)

// ValidMode reports whether m is one of the modes.
func ValidMode(m string) bool { return m == FailOpen || m == FailClosed || m == Local }

// DefaultTimeout bounds each call to the primary unless Config.Timeout
// says otherwise (sluice serve's --store-timeout default).
const DefaultTimeout = 250 * time.Millisecond

// Config configures New.
type Config struct {
	// Primary is the shared store.
	Primary store.Store
	// Mode is the default for limits without their own (required).
	Mode string
	// Instances divides budgets in local mode (default 1).
	Instances int
	// Timeout bounds every call to the primary (default DefaultTimeout; a
	// caller's earlier deadline wins): at the deadline the wrapper stops
	// waiting, opens the circuit and answers by on_store_error.
	Timeout time.Duration
	// ProbeInterval is how often, while degraded, the primary is tried
	// again (default 250 ms).
	ProbeInterval time.Duration
	// MaxKeys caps the local store's keys (default memstore's), and the
	// keys whose last shared level is remembered for local mode.
	MaxKeys int
	// Logger receives one record when the store degrades and one when it
	// recovers (each within a budget of ratelog.Burst records, then
	// ratelog.Rate a second, the rest counted in "suppressed"); nil
	// discards them.
	Logger *slog.Logger
	// Registerer registers sluice_store_degraded and
	// sluice_store_fallback_decisions_total; nil registers nothing.
	Registerer prometheus.Registerer
}

// ErrTimeout reports a call to the primary that did not answer within
// Config.Timeout. It matches store.ErrUnavailable.
var ErrTimeout = fmt.Errorf("%w: no answer within the store timeout", store.ErrUnavailable)

// Store is the failover wrapper. It is safe for concurrent use.
type Store struct {
	cfg        Config
	local      *memstore.Store
	ping       func(context.Context) error // the primary's Ping, or nil
	degraded   atomic.Bool
	probing    atomic.Bool  // the background prober runs
	confirming atomic.Bool  // a suspect's ping runs
	nextProbe  atomic.Int64 // Unix ns (primaries without Ping)
	scaled     sync.Map     // *store.Spec -> *store.Spec (local budget)
	gauge      prometheus.Gauge
	fallbacks  *prometheus.CounterVec
	downLog    *ratelog.Message
	upLog      *ratelog.Message
	mu         sync.Mutex
	lastErr    error
	levels     levels       // local mode: the shared levels last seen, the keys decided locally
	handoff    sync.RWMutex // held (write) while the local levels are handed back
	closed     chan struct{}
	closeOnce  sync.Once
}

// localPrefix marks slots taken from the local store.
const localPrefix = "local~"

// New returns the wrapper.
func New(cfg Config) (*Store, error) {
	if cfg.Primary == nil {
		return nil, errors.New("failover: no primary store")
	}
	if !ValidMode(cfg.Mode) {
		return nil, fmt.Errorf("failover: on_store_error %q is not fail_open, fail_closed or local", cfg.Mode)
	}
	if cfg.Instances == 0 {
		cfg.Instances = 1
	}
	if cfg.Instances < 1 {
		return nil, fmt.Errorf("failover: instances %d must be at least 1", cfg.Instances)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("failover: timeout %v must be positive", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{cfg: cfg, local: memstore.New(memstore.WithMaxKeys(cfg.MaxKeys)), closed: make(chan struct{}),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_store_degraded",
			Help: "1 while the shared store is unreachable and decisions follow on_store_error."}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_store_fallback_decisions_total",
			Help: "Limit decisions made without the shared store, by on_store_error mode."}, []string{"mode"}),
		downLog: ratelog.New(cfg.Logger, slog.LevelWarn, "store unreachable: deciding by on_store_error until it answers"),
		upLog:   ratelog.New(cfg.Logger, slog.LevelInfo, "store reachable again: decisions use it"),
	}
	s.levels.init(cfg.MaxKeys)
	if p, ok := cfg.Primary.(interface{ Ping(context.Context) error }); ok {
		s.ping = p.Ping
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.gauge, s.fallbacks} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("failover: registering metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Degraded reports whether decisions currently bypass the primary.
func (s *Store) Degraded() bool { return s.degraded.Load() }

// Timeout returns the bound on each call to the primary.
func (s *Store) Timeout() time.Duration { return s.cfg.Timeout }

// outage reports whether err means the primary failed (rather than the
// request being invalid, the caller giving up, or the store answering and
// refusing: an error in err's chain with Refused() true, as redisstore's
// for OOM or READONLY, is returned to the caller as is, on_store_error not
// applying and the circuit staying closed).
func outage(ctx context.Context, err error) bool {
	var r interface{ Refused() bool }
	switch {
	case err == nil, errors.Is(err, store.ErrInvalidItem), errors.Is(err, store.ErrFull), errors.Is(err, store.ErrClosed),
		errors.Is(err, store.ErrCannotRenew):
		return false
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return false // the caller gave up: not the store's fault
	case errors.As(err, &r) && r.Refused():
		return false
	}
	return true
}

// cause returns the error that degraded the store.
func (s *Store) cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr == nil {
		return store.ErrUnavailable
	}
	return s.lastErr
}

func (s *Store) setCause(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// degrade opens the circuit: no request's call goes to the primary until
// a probe answers.
func (s *Store) degrade(err error) {
	s.setCause(err)
	s.nextProbe.Store(time.Now().Add(s.cfg.ProbeInterval).UnixNano())
	if !s.degraded.Swap(true) {
		s.levels.newOutage()
		s.gauge.Set(1)
		s.downLog.Log(slog.String("error", err.Error()), slog.String("on_store_error", s.cfg.Mode), slog.Int("instances", s.cfg.Instances))
	}
	if s.ping != nil && s.probing.CompareAndSwap(false, true) {
		go s.probe()
	}
}

func (s *Store) recover() {
	if s.degraded.Swap(false) {
		s.gauge.Set(0)
		s.upLog.Log()
	}
}

// usePrimary reports whether this call should go to the primary: always
// when healthy; while degraded never when a background probe runs (a
// primary with Ping), else one call per probe interval.
func (s *Store) usePrimary() bool {
	if !s.degraded.Load() {
		return true
	}
	if s.ping != nil {
		return false
	}
	next := s.nextProbe.Load()
	now := time.Now().UnixNano()
	return now >= next && s.nextProbe.CompareAndSwap(next, now+int64(s.cfg.ProbeInterval))
}

// Take implements store.Store. While the primary answers, local-mode token
// buckets remember the level it reported for each key; when it fails, a
// key's local bucket starts from this instance's share of that level
// (refilled since at the limit's rate, at most the share's capacity), not
// full; and when the primary answers again, before any request is sent to
// it, every key decided locally is lowered on it (store.Adjustment.Lower)
// to Instances times what its local bucket holds, so that a Redis that
// lost its data (restarted empty) does not start those keys full.
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	if err := store.Validate(items); err != nil {
		return store.Result{}, err
	}
	if !s.usePrimary() {
		return s.fallback(ctx, items, s.cause())
	}
	r, err := s.takePrimary(ctx, items)
	if !outage(ctx, err) {
		if err == nil {
			s.recoverFromCall()
			s.levels.observe(s, items)
		}
		return r, err
	}
	s.degrade(err)
	return s.fallback(ctx, items, err)
}

// recoverFromCall closes the circuit after a call that went to the primary
// while degraded (a primary without Ping: the probe is a request's call).
func (s *Store) recoverFromCall() {
	if s.degraded.Load() && s.ping == nil {
		s.recover()
	}
}

func (s *Store) mode(sp *store.Spec) string {
	if sp.OnStoreError != "" {
		return sp.OnStoreError
	}
	return s.cfg.Mode
}

// fallback decides items without the primary.
func (s *Store) fallback(ctx context.Context, items []store.Item, cause error) (store.Result, error) {
	for _, it := range items {
		if s.mode(it.Spec) == FailClosed {
			s.fallbacks.WithLabelValues(FailClosed).Inc()
			return store.Result{}, fmt.Errorf("%w (on_store_error fail_closed): %w", store.ErrUnavailable, cause)
		}
	}
	res := store.Result{Allowed: true}
	var local []store.Item
	var at []int
	for i := range items {
		it := &items[i]
		it.RefundBefore, it.Wait = 0, 0
		if s.mode(it.Spec) == FailOpen {
			s.fallbacks.WithLabelValues(FailOpen).Inc()
			it.Decision = sluice.Decision{Allowed: true, Remaining: max(it.Spec.Capacity()-it.Cost, 0)}
			continue
		}
		s.fallbacks.WithLabelValues(Local).Inc()
		sp := s.scale(it.Spec)
		if !it.Spec.HoldsSlots() && it.Cost > sp.Capacity() {
			// More than this instance's share can ever hold.
			it.Decision = sluice.Decision{}
			res.Allowed = false
			continue
		}
		local = append(local, store.Item{Key: it.Key, Spec: sp, Base: s.scaleBase(it.Base), Cost: it.Cost, MaxWait: it.MaxWait})
		at = append(at, i)
	}
	if len(local) == 0 {
		return res, nil
	}
	// Local decisions wait while the local levels are handed back to the
	// primary (one bounded call), then go to the primary if it took over.
	s.handoff.RLock()
	if !s.degraded.Load() {
		s.handoff.RUnlock()
		return s.Take(ctx, items)
	}
	defer s.handoff.RUnlock()
	s.levels.seed(ctx, s, items, at, local)
	if !res.Allowed { // refused already: decide the rest without taking
		for i := range local {
			local[i].Cost = 0
		}
	}
	r, err := s.local.Take(ctx, local)
	if err != nil {
		return store.Result{}, err
	}
	for j, i := range at {
		items[i].Decision = local[j].Decision
		items[i].RefundBefore = local[j].RefundBefore
		items[i].Wait = local[j].Wait
	}
	res.Allowed = res.Allowed && r.Allowed
	if res.Allowed {
		res.Wait = r.Wait
	} else {
		for i := range items {
			items[i].Wait = 0
		}
	}
	if res.Allowed && r.Slots.ID != "" {
		res.Slots = store.Slots{ID: localPrefix + r.Slots.ID, Keys: r.Slots.Keys}
	}
	return res, nil
}

// scale returns sp with its budget divided among the instances.
func (s *Store) scale(sp *store.Spec) *store.Spec {
	if s.cfg.Instances == 1 {
		return sp
	}
	if v, ok := s.scaled.Load(sp); ok {
		return v.(*store.Spec)
	}
	out := sp.Scaled(int64(s.cfg.Instances))
	v, _ := s.scaled.LoadOrStore(sp, out)
	return v.(*store.Spec)
}

// scaleBase is scale for an item's Base (nil: none).
func (s *Store) scaleBase(sp *store.Spec) *store.Spec {
	if sp == nil {
		return nil
	}
	return s.scale(sp)
}

// ConvertsSpecs implements store.SpecConverter: the primary's answer (the
// local fallback, a memstore, converts too: store.Item.Base is passed to
// it, scaled as the item's spec).
func (s *Store) ConvertsSpecs() bool {
	c, ok := s.cfg.Primary.(store.SpecConverter)
	return ok && c.ConvertsSpecs()
}

// unavailable is the error of a call not sent because the store is
// degraded.
func (s *Store) unavailable() error {
	return fmt.Errorf("%w (degraded: not called until it answers a probe): %w", store.ErrUnavailable, s.cause())
}

// Release implements store.Store: a slot taken locally is released
// locally; one taken on the primary is released there, and while degraded
// it is not sent (an error matching store.ErrUnavailable: its slots expire
// by their TTL unless released again once the store answers).
func (s *Store) Release(ctx context.Context, slots store.Slots) error {
	if id, ok := strings.CutPrefix(slots.ID, localPrefix); ok {
		return s.local.Release(ctx, store.Slots{ID: id, Keys: slots.Keys})
	}
	return s.callPrimary(ctx, func(ctx context.Context) error { return s.cfg.Primary.Release(ctx, slots) })
}

// CanRenew reports whether the primary can renew slots (the local store
// can).
func (s *Store) CanRenew() bool { return store.CanRenew(s.cfg.Primary) }

// Renew implements store.Renewer: on the store that holds the slot (the
// local one for a slot taken while degraded); a primary slot is not
// renewed while degraded (store.ErrUnavailable).
func (s *Store) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	if id, ok := strings.CutPrefix(slots.ID, localPrefix); ok {
		return store.Renew(ctx, s.local, store.Slots{ID: id, Keys: slots.Keys}, ttl)
	}
	return s.callPrimary(ctx, func(ctx context.Context) error { return store.Renew(ctx, s.cfg.Primary, slots, ttl) })
}

// Adjust implements store.Store: on the primary, or while degraded on the
// local buckets (where the items were taken then; adjustments of other
// modes' limits are dropped).
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	if s.degraded.Load() {
		return s.adjustLocal(ctx, adj)
	}
	return s.callPrimary(ctx, func(ctx context.Context) error { return s.cfg.Primary.Adjust(ctx, adj) })
}

// AdjustRelease implements store.AdjustReleaser: Adjust's adjustments and
// Release's release as those two would make them (on the primary, or
// while degraded on the local store; a slot taken on the primary is not
// released while degraded), in one call bounded by the timeout when both
// go to the primary (store.AdjustRelease).
func (s *Store) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	if id, ok := strings.CutPrefix(slots.ID, localPrefix); ok {
		var aerr error
		if len(adj) > 0 {
			aerr = s.Adjust(ctx, adj)
		}
		return errors.Join(aerr, s.local.Release(ctx, store.Slots{ID: id, Keys: slots.Keys}))
	}
	if s.degraded.Load() {
		var rerr error
		if slots.ID != "" {
			rerr = s.unavailable() // (as Release: its slots expire by their TTL)
		}
		return errors.Join(s.adjustLocal(ctx, adj), rerr)
	}
	return s.callPrimary(ctx, func(ctx context.Context) error { return store.AdjustRelease(ctx, s.cfg.Primary, adj, slots) })
}

func (s *Store) adjustLocal(ctx context.Context, adj []store.Adjustment) error {
	local := make([]store.Adjustment, 0, len(adj))
	for _, a := range adj {
		if a.Spec != nil && s.mode(a.Spec) == Local {
			a.Spec, a.Base = s.scale(a.Spec), s.scaleBase(a.Base)
			if a.Op() == 'l' {
				a.Delta /= int64(s.cfg.Instances) // this instance's share of what is left
			}
			local = append(local, a)
		}
	}
	return s.local.Adjust(ctx, local)
}

// Ping checks the primary (when it can be pinged), bounded by the
// timeout. While degraded it does not call it: it returns the error of
// the last failed call or probe at once (the background probe closes the
// circuit when the primary answers).
func (s *Store) Ping(ctx context.Context) error {
	if s.ping == nil {
		return nil
	}
	if s.degraded.Load() {
		return s.unavailable()
	}
	return s.callPrimary(ctx, s.ping)
}

// Close stops the probe and closes both stores.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	s.local.Close()
	return s.cfg.Primary.Close()
}
