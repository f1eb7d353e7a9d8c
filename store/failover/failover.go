// Package failover wraps a shared store (Redis) with a defined behaviour for
// when it cannot be reached. Each limit chooses (store.Spec.OnStoreError,
// from the policy's on_store_error; else the wrapper's default):
//
//   - fail_open: the request is admitted by that limit;
//   - fail_closed: the request is refused with an error matching
//     store.ErrUnavailable (the service answers 503);
//   - local: the limit is enforced by in-process buckets (a memstore) with
//     its budget divided by the configured number of instances, so that
//     together the instances stay within the shared budget.
//
// A request needing several limits is refused if any of them fails closed
// or is refused locally; fail-open limits admit.
//
// The wrapper notices a failure from the call that fails (every call to the
// backend is bounded by the backend's own timeout and the caller's
// deadline), sets the sluice_store_degraded gauge and logs once. While
// degraded it does not wait on the backend: at most one call per probe
// interval (250 ms) tries it again (and Ping, from /readyz, also probes); the first
// success returns every later call to the backend, without a restart.
// Budgets are not reconciled: what was admitted locally is not charged to
// the shared store afterwards.
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
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// Modes of OnStoreError.
const (
	FailOpen   = "fail_open"
	FailClosed = "fail_closed"
	Local      = "local"
)

// ValidMode reports whether m is one of the modes.
func ValidMode(m string) bool { return m == FailOpen || m == FailClosed || m == Local }

// Config configures New.
type Config struct {
	// Primary is the shared store.
	Primary store.Store
	// Mode is the default for limits without their own (required).
	Mode string
	// Instances divides budgets in local mode (default 1).
	Instances int
	// ProbeInterval is how often, while degraded, one call tries the
	// primary again (default 250 ms).
	ProbeInterval time.Duration
	// MaxKeys caps the local store's keys (default memstore's).
	MaxKeys int
	// Logger receives one record when the store degrades and one when it
	// recovers; nil discards them.
	Logger *slog.Logger
	// Registerer registers sluice_store_degraded and
	// sluice_store_fallback_decisions_total; nil registers nothing.
	Registerer prometheus.Registerer
}

// Store is the failover wrapper. It is safe for concurrent use.
type Store struct {
	cfg       Config
	local     *memstore.Store
	degraded  atomic.Bool
	nextProbe atomic.Int64 // Unix ns
	scaled    sync.Map     // *store.Spec -> *store.Spec (local budget)
	gauge     prometheus.Gauge
	fallbacks *prometheus.CounterVec
	mu        sync.Mutex
	lastErr   error
}

// localPrefix marks leases taken from the local store.
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
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{cfg: cfg, local: memstore.New(memstore.WithMaxKeys(cfg.MaxKeys)),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_store_degraded",
			Help: "1 while the shared store is unreachable and decisions follow on_store_error."}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_store_fallback_decisions_total",
			Help: "Limit decisions made without the shared store, by on_store_error mode."}, []string{"mode"}),
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

// outage reports whether err means the primary failed (rather than the
// request being invalid or the caller giving up).
func outage(ctx context.Context, err error) bool {
	switch {
	case err == nil, errors.Is(err, store.ErrInvalidItem), errors.Is(err, store.ErrFull), errors.Is(err, store.ErrClosed),
		errors.Is(err, store.ErrCannotRenew), Refused(err):
		return false
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return false // the caller gave up: not the store's fault
	}
	return true
}

// Refused reports whether err says the primary was reached and refused the
// call: an error in its chain has a method Refused() bool answering true
// (redisstore's OOM, READONLY, NOSCRIPT, WRONGTYPE and other error
// replies). A refusal is not an outage: on_store_error does not apply (a
// fail_open limit must not admit without a decision while Redis keeps
// refusing), the caller gets the error, and the primary counts as
// reachable (a degraded wrapper returns to it).
func Refused(err error) bool {
	var r interface{ Refused() bool }
	return errors.As(err, &r) && r.Refused()
}

func (s *Store) degrade(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
	s.nextProbe.Store(time.Now().Add(s.cfg.ProbeInterval).UnixNano())
	if !s.degraded.Swap(true) {
		s.gauge.Set(1)
		s.cfg.Logger.Warn("store unreachable: deciding by on_store_error until it answers",
			"error", err.Error(), "on_store_error", s.cfg.Mode, "instances", s.cfg.Instances)
	}
}

func (s *Store) recover() {
	if s.degraded.Swap(false) {
		s.gauge.Set(0)
		s.cfg.Logger.Info("store reachable again: decisions use it")
	}
}

// usePrimary reports whether this call should go to the primary: always
// when healthy; while degraded, one call per probe interval.
func (s *Store) usePrimary() bool {
	if !s.degraded.Load() {
		return true
	}
	next := s.nextProbe.Load()
	now := time.Now().UnixNano()
	return now >= next && s.nextProbe.CompareAndSwap(next, now+int64(s.cfg.ProbeInterval))
}

// Take implements store.Store.
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	if err := store.Validate(items); err != nil {
		return store.Result{}, err
	}
	var cause error
	if s.usePrimary() {
		r, err := s.cfg.Primary.Take(ctx, items)
		if !outage(ctx, err) {
			if err == nil || Refused(err) {
				s.recover()
			}
			return r, err
		}
		s.degrade(err)
		cause = err
	} else {
		s.mu.Lock()
		cause = s.lastErr
		s.mu.Unlock()
	}
	return s.fallback(ctx, items, cause)
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
		local = append(local, store.Item{Key: it.Key, Spec: sp, Cost: it.Cost, MaxWait: it.MaxWait})
		at = append(at, i)
	}
	if len(local) == 0 {
		return res, nil
	}
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
	if res.Allowed && r.Lease.ID != "" {
		res.Lease = store.Lease{ID: localPrefix + r.Lease.ID, Keys: r.Lease.Keys}
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

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, lease store.Lease) error {
	if id, ok := strings.CutPrefix(lease.ID, localPrefix); ok {
		return s.local.Release(ctx, store.Lease{ID: id, Keys: lease.Keys})
	}
	err := s.cfg.Primary.Release(ctx, lease)
	if outage(ctx, err) {
		s.degrade(err)
	}
	return err
}

// CanRenew reports whether the primary can renew leases (the local store
// can).
func (s *Store) CanRenew() bool { return store.CanRenew(s.cfg.Primary) }

// Renew implements store.Renewer: on the store that holds the lease (the
// local one for a lease taken while degraded).
func (s *Store) Renew(ctx context.Context, lease store.Lease, ttl time.Duration) error {
	if id, ok := strings.CutPrefix(lease.ID, localPrefix); ok {
		return store.Renew(ctx, s.local, store.Lease{ID: id, Keys: lease.Keys}, ttl)
	}
	err := store.Renew(ctx, s.cfg.Primary, lease, ttl)
	if outage(ctx, err) {
		s.degrade(err)
	}
	return err
}

// Adjust implements store.Store: on the primary, or while degraded on the
// local buckets (where the items were taken then).
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	if s.degraded.Load() {
		local := make([]store.Adjustment, 0, len(adj))
		for _, a := range adj {
			if a.Spec != nil && s.mode(a.Spec) == Local {
				a.Spec = s.scale(a.Spec)
				if a.Op() == 'l' {
					a.Delta /= int64(s.cfg.Instances) // this instance's share of what is left
				}
				local = append(local, a)
			}
		}
		return s.local.Adjust(ctx, local)
	}
	err := s.cfg.Primary.Adjust(ctx, adj)
	if outage(ctx, err) {
		s.degrade(err)
	}
	return err
}

// Ping checks the primary (when it can be pinged) and recovers on success.
func (s *Store) Ping(ctx context.Context) error {
	p, ok := s.cfg.Primary.(interface{ Ping(context.Context) error })
	if !ok {
		return nil
	}
	if err := p.Ping(ctx); err != nil {
		if outage(ctx, err) {
			s.degrade(err)
		} else if Refused(err) {
			s.recover()
		}
		return err
	}
	s.recover()
	return nil
}

// Close closes both stores.
func (s *Store) Close() error {
	s.local.Close()
	return s.cfg.Primary.Close()
}
