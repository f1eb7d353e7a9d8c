// Package limiter is sluice's keyed engine: it finds the limits of a policy
// that apply to a request, takes the request's cost from every one of them
// at once through a store (all or nothing), and reports a status per limit.
// It logs refusals and exports Prometheus metrics per limit name (never per
// key).
package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// Option configures New.
type Option func(*Limiter)

// WithLogger logs refusals (and store failures) to l, at most about 10
// records a second; the rest are counted in the next record's
// "suppressed" field.
func WithLogger(l *slog.Logger) Option { return func(x *Limiter) { x.log = l } }

// WithRegisterer registers the limiter's Prometheus metrics with r.
func WithRegisterer(r prometheus.Registerer) Option { return func(x *Limiter) { x.reg = r } }

// KeyObserver receives, for every decision (peeks excepted), each limit's
// key as statuses show it (redacted descriptors as hashes), the cost it
// admitted (0 when the request was refused) and whether that limit refused
// it (shadow: a shadow limit's would-be refusal). It is called on the
// deciding goroutine: it must be quick and safe for concurrent use.
type KeyObserver interface {
	ObserveKey(limit, key string, admitted int64, refused, shadow bool)
}

// WithShadow puts every limit in shadow mode (sluice serve --shadow): each
// is evaluated and counted as if enforced, but none refuses (see
// policy.Limit.Shadow).
func WithShadow() Option { return func(x *Limiter) { x.shadowAll = true } }

// WithKeyObserver sets o to receive every decision's keys (the heaviest
// keys of sluice serve's /v1/top). When o is also an OverrideObserver it
// learns which keys an override decided.
func WithKeyObserver(o KeyObserver) Option {
	return func(x *Limiter) { x.keys = o; x.ovKeys, _ = o.(OverrideObserver) }
}

// OverrideObserver is a KeyObserver that is also told, right after
// ObserveKey, of each key an override decided: its canonical match
// (overrides.CanonicalMatch) and whether it was a deny. Same rules as
// ObserveKey.
type OverrideObserver interface {
	ObserveOverride(limit, key, match string, denied bool)
}

// timedTaker is a store.KeyBorrower that decides at a clock reading its
// caller has just made (memstore.Store.TakeBorrowedAt), so that a check
// that reads the clock anyway reads it once.
type timedTaker interface {
	TakeBorrowedAt(ctx context.Context, items []store.Item, now time.Time) (store.Result, error)
}

// Limiter checks requests against a policy. It is safe for concurrent use;
// SetPolicy swaps the policy atomically.
type Limiter struct {
	st        store.Store
	kb        store.KeyBorrower // st, when it lends keys; else nil
	tt        timedTaker        // kb, when it decides at a reading of ours; else nil
	ht        heldTaker         // kb, when it decides plain buckets it holds apart (limiter/fast.go); else nil
	log       *slog.Logger
	reg       prometheus.Registerer
	keys      KeyObserver
	ovKeys    OverrideObserver // keys, when it is one
	shadowAll bool
	compiled  atomic.Pointer[compiled]
	ovr       *overrides.Set // the overrides applied (SetOverrides); guarded by mu
	mu        sync.Mutex     // serializes SetPolicy and SetOverrides
	logs      *ratelog.Budget
	m         metrics
	bufs      sync.Pool // *scratch, for Check
}

type compiled struct {
	p      *policy.Policy
	specs  []*store.Spec // per policy limit
	prefix []string      // per limit: "name:", the store key's prefix
	// per limit: its status with the fields that do not change filled in,
	// and whether it is an in-flight cap (whose items cost one slot)
	status []LimitStatus
	conc   []bool
	// counters per limit, [admitted, rejected, shadow_rejected][original, retry]
	counters [][3][2]prometheus.Counter
	classCtr [][][3][2]prometheus.Counter // the same per priority class (classMetrics)
	near     []prometheus.Counter
	// per limit: whether it is in shadow mode; and whether any is
	shadow    []bool
	anyShadow bool
	// per limit: its overrides (nil without a Set), and the counters of
	// sluice_override_decisions_total by result (overrideResults)
	ix      []*overrides.Index
	ovCount [][numOverrideResults]prometheus.Counter
	// converts: the store converts a key's state between specs
	// (store.SpecConverter), so an override's spec shares the policy's key
	converts bool
	anyIx    bool             // a Set is applied (ix holds Indexes)
	ovc      []*ovCache       // per limit: its cache of resolved overrides (nil: none)
	adapt    []*adaptiveLimit // per limit: its adaptive ceilings (nil: no limit is adaptive; limiter/adaptive.go)
	fast     *fastPlan        // the fast path's plan (nil: none; limiter/fast.go), while no Set is applied (anyIx)
}

type metrics struct {
	decisions *decisionVec // with the priority label from the first policy with classes (decisions.go)
	latency   prometheus.Histogram
	errors    prometheus.Counter
	waits     *prometheus.CounterVec // booked waits, per limit
	waitSecs  prometheus.Histogram   // their lengths
	lateness  prometheus.Histogram   // how late a booked request woke for its turn
	pauses    *prometheus.CounterVec // pauses, per limit
	near      *prometheus.CounterVec // admitted with less than a fifth left, per limit
	capacity  *prometheus.GaugeVec   // the configured capacities
	refill    *prometheus.GaugeVec   // and refills
	overrides *prometheus.CounterVec // decisions an override applied to, per limit and result
}

// NearLimitShare is the share of its capacity below which an admitted
// request counts in sluice_limit_near_total (as envoyproxy/ratelimit's
// near_limit: 0.8 used).
const NearLimitShare = 0.2

// New returns a limiter enforcing p with state in s.
func New(p *policy.Policy, s store.Store, opts ...Option) (*Limiter, error) {
	if p == nil || s == nil {
		return nil, errors.New("limiter: nil policy or store")
	}
	l := &Limiter{st: s}
	l.kb, _ = s.(store.KeyBorrower)
	if l.kb != nil {
		l.tt, _ = s.(timedTaker)
		l.ht, _ = s.(heldTaker)
	}
	for _, o := range opts {
		o(l)
	}
	l.bufs.New = func() any { return newScratch() }
	l.logs = ratelog.NewBudget()
	l.m = metrics{
		decisions: newDecisionVec(p),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_check_duration_seconds",
			Help:    "Time to decide one Check, store round trip included.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total", Help: "Checks that failed because the store failed.",
		}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_waits_total", Help: "Requests booked to wait for their turn (MaxWait, max_wait_ms), per limit that made them wait.",
		}, []string{"limit"}),
		waitSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_wait_seconds", Help: "Booked waits: the time from a booking to the request's turn.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 4, 10),
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_wait_lateness_seconds", Help: "How late a booked request held by Check woke for its turn (its wake-up less its due time).",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pauses_total", Help: "Pauses (a server's retry hint, Limiter.Pause, /v1/pause), per limit paused.",
		}, []string{"limit"}),
		near: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_limit_near_total", Help: "Requests admitted by a limit with less than 20% of its capacity left afterwards (envoyproxy/ratelimit's near_limit).",
		}, []string{"limit"}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_limit_capacity", Help: "A limit's configured capacity: bucket capacity, window or quota limit, or max in flight.",
		}, []string{"limit"}),
		refill: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_limit_refill_per_second", Help: "A token-bucket limit's configured refill per second (0 for other kinds).",
		}, []string{"limit"}),
		overrides: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_override_decisions_total", Help: "Decisions an override applied to, per limit and result (admitted/rejected/shadow_rejected/denied).",
		}, []string{"limit", "result"}),
	}
	if err := l.SetPolicy(p); err != nil {
		return nil, err
	}
	if l.reg != nil {
		cs := []prometheus.Collector{l.m.decisions, l.m.latency, l.m.errors, l.m.waits, l.m.waitSecs, l.m.lateness, l.m.pauses,
			l.m.near, l.m.capacity, l.m.refill, l.m.overrides}
		if sr, ok := s.(store.StatsReporter); ok {
			cs = append(cs,
				prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_keys", Help: "Keys held by the store."},
					func() float64 { return float64(sr.Stats().Keys) }))
			cs = append(cs, evictionMetrics(sr)...)
		}
		for _, c := range cs {
			if err := l.reg.Register(c); err != nil {
				return nil, fmt.Errorf("limiter: registering metrics: %w", err)
			}
		}
	}
	return l, nil
}

// SetPolicy replaces the policy at once. Buckets of limits whose name and
// parameters are unchanged keep their state (their keys do not change).
// The overrides in force (SetOverrides) apply to the new policy's limits
// by name.
func (l *Limiter) SetPolicy(p *policy.Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &compiled{p: p, specs: make([]*store.Spec, len(p.Limits)), prefix: make([]string, len(p.Limits)),
		counters: make([][3][2]prometheus.Counter, len(p.Limits)),
		status:   make([]LimitStatus, len(p.Limits)), conc: make([]bool, len(p.Limits)), shadow: make([]bool, len(p.Limits)),
		near: make([]prometheus.Counter, len(p.Limits))}
	old := l.compiled.Load()
	l.m.capacity.Reset()
	l.m.refill.Reset()
	for i, lim := range p.Limits {
		c.status[i] = statusOf(lim)
		c.shadow[i] = lim.Shadow || l.shadowAll
		c.anyShadow = c.anyShadow || c.shadow[i]
		c.status[i].Shadow = c.shadow[i]
		c.near[i] = l.m.near.WithLabelValues(lim.Name)
		l.m.capacity.WithLabelValues(lim.Name).Set(float64(c.status[i].Capacity))
		l.m.refill.WithLabelValues(lim.Name).Set(c.status[i].RefillPerSecond)
		if j := old.index(lim.Name); j >= 0 && sameLimit(old.p.Limits[j], lim) {
			c.specs[i], c.prefix[i] = old.specs[j], old.prefix[j]
		} else {
			sp, err := specOf(lim, l.shadowAll)
			if err != nil {
				return fmt.Errorf("limiter: limit %q: %w", lim.Name, err)
			}
			c.specs[i], c.prefix[i] = sp, keyPrefix(lim.Name, sp)
		}
		c.conc[i] = c.specs[i].HoldsSlots()
		c.status[i].BlockFor = c.specs[i].BlockFor
	}
	if err := c.adaptives(); err != nil {
		return err
	}
	l.m.decisions.relabel(p) // (the policy is valid: its counters follow)
	for i, lim := range p.Limits {
		for r, result := range decisionResults {
			for a, attempt := range attempts {
				c.counters[i][r][a] = l.decisionCounter(lim.Name, result, attempt, "")
			}
		}
		l.classMetrics(c, i, lim.Name)
	}
	c.fast = l.newFastPlan(c)
	l.withOverrides(c)
	l.compiled.Store(c)
	return nil
}

// Statuses returns the configured part of every limit's status in force
// (name, algorithm, capacity, refill, window or period, shadow), in policy
// order.
func (l *Limiter) Statuses() []LimitStatus {
	return append([]LimitStatus(nil), l.compiled.Load().status...)
}

// Policy returns the policy in force.
func (l *Limiter) Policy() *policy.Policy { return l.compiled.Load().p }

// index is the policy index of the limit named name; -1 when there is
// none (or no policy: c nil).
func (c *compiled) index(name string) int {
	if c == nil {
		return -1
	}
	for i, lim := range c.p.Limits {
		if lim.Name == name {
			return i
		}
	}
	return -1
}

// keyPrefix is the store key's prefix of a limit's keys: its name and,
// when the spec has one, its state tag ("name@u5f5e100:"), so that a
// limit changed into other units starts anew instead of misreading its
// old state (store.Spec.StateTag).
func keyPrefix(name string, sp *store.Spec) string {
	if tag := sp.StateTag(); tag != "" {
		return name + "@" + tag + ":"
	}
	return name + ":"
}

// sameLimit reports whether b keeps a's keys and state: the same kind and
// parameters (store.Limit), key template and on_store_error.
func sameLimit(a, b *policy.Limit) bool {
	return a.Limit == b.Limit && a.Key == b.Key && a.OnStoreError == b.OnStoreError
}

// specOf compiles lim's spec; shadow (WithShadow) drops its BlockFor, as
// a shadow policy limit's (a shadow refusal blocks no key). It is
// compiled once per limit (SetPolicy keeps it while the limit is
// unchanged): stores may key caches by the spec's pointer.
func specOf(lim *policy.Limit, shadow bool) (*store.Spec, error) {
	sl := lim.StoreLimit()
	if shadow {
		sl.BlockFor = 0
	}
	sp, err := store.NewSpec(sl)
	if err == nil {
		sp.OnStoreError = lim.OnStoreError
	}
	return sp, err
}

// statusOf is a limit's status before a decision: what it is.
func statusOf(lim *policy.Limit) LimitStatus {
	sh := lim.Shape()
	return LimitStatus{Name: lim.Name, Algorithm: lim.Kind.String(), Capacity: sh.Capacity,
		RefillPerSecond: sh.Rate, Window: sh.Span, Period: sh.Period}
}

// Check decides req: it takes the request's cost from every applicable
// limit or from none. A refused request is a Result with Allowed false,
// not an error; errors are for bad requests (sluice.ErrInvalidCost, a
// *CostError) and store failures.
func (l *Limiter) Check(ctx context.Context, req Request) (Result, error) {
	buf := l.bufs.Get().(*scratch)
	var res Result
	var err error
	if !l.fast(ctx, &req, &res, buf) {
		err = l.check(ctx, &req, &res, buf)
	}
	l.bufs.Put(buf)
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// CheckInto is Check writing its result into *res, reusing the storage of
// res.Limits (and working space res keeps for the purpose): a caller that
// keeps one Result per goroutine decides without allocating (over
// store/memstore, for keys it holds). res must not be shared between
// goroutines, and a status slice taken from it earlier is overwritten by
// the next call. On error *res is zero (its storage kept).
func (l *Limiter) CheckInto(ctx context.Context, req Request, res *Result) error {
	sc := res.scratch
	if sc == nil {
		sc = newScratch()
		res.scratch = sc
	}
	if c := l.compiled.Load(); c.fast != nil && !c.anyIx && fastRequest(&req) && l.checkFast(ctx, c, &req, res, sc) {
		return nil // (as fast, written out: a call fewer)
	}
	limits := res.Limits[:0]
	*res = Result{Limits: limits, scratch: sc}
	err := l.check(ctx, &req, res, sc)
	if err != nil {
		*res = Result{Limits: limits, scratch: sc}
	}
	return err
}

// check is Check's path when fast declines: plan makes the items, the
// store decides them, and the statuses take the decisions.
func (l *Limiter) check(ctx context.Context, req *Request, res *Result, sc *scratch) error {
	c := l.compiled.Load()
	timed := sc.sample() // the latency histogram samples one check in 16
	var start time.Time
	if sc.clocked = timed; timed {
		start = time.Now()
		sc.now = start
	}
	// Borrowed keys when the store copies what it keeps (and hands back
	// keys it owns). (The items of the last check stay in the scratch
	// until the next one overwrites them: keys the store owns, a few at
	// most.)
	borrows := l.kb != nil
	items, err := c.plan(req, sc, res, borrows)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		l.observe(ctx, c, nil, res, req, start, timed)
		return nil
	}
	which, user := sc.which, sc.user
	rules := sc.rules
	if len(rules) == 0 {
		rules = nil
	}
	odd := rules
	if !sc.odd {
		odd = nil // (no override makes an item shadow or skips the store: take's fast path)
	}
	if req.Priority != "" || c.p.DefaultPriority != "" { // (no class: no work)
		if err := c.classify(req, items, res); err != nil {
			return err
		}
	}
	if req.MaxWait > 0 && !req.Peek {
		mw := req.MaxWait
		if dl, ok := ctx.Deadline(); ok {
			mw = min(mw, time.Until(dl))
		}
		for j := range items {
			items[j].MaxWait = max(mw, 1)
		}
	}
	var now *time.Time // (the check's clock reading, when it made one)
	if sc.clocked {
		now = &sc.now
	}
	r, err := l.take(ctx, c, items, which, odd, borrows, now)
	if err != nil {
		err = l.shownKeys(c, err, items, which, user, req.Descriptors)
		if !errors.Is(err, store.ErrFull) {
			l.m.errors.Inc()
		}
		l.logf(slog.LevelError, "rate limit: store failed", slog.String("error", err.Error()))
		return fmt.Errorf("limiter: %w", err)
	}
	res.Allowed, res.Slots, res.RetryAfter = r.Allowed, r.Slots, 0
	for i := range items {
		d := items[i].Decision
		st := &res.Limits[i]
		st.Key = items[i].Key[user[i]:]
		st.Allowed, st.TokensRemaining, st.RetryAfter, st.ResetAfter = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter
		if st.Shadow {
			shadowVerdict(st, items[i], req.Peek)
			continue // (a shadow limit's wait refuses nothing)
		}
		res.RetryAfter = max(res.RetryAfter, d.RetryAfter)
	}
	if c.adapt != nil {
		c.adaptStatus(res.Limits, items, which)
	}
	if r.Allowed && r.Wait > 0 {
		l.observeWait(c, items, which, r.Wait)
		traceWait(ctx, r.Wait, req.Reserve)
		// Booked: the request's place in line comes after r.Wait.
		if req.Reserve {
			res.Wait = r.Wait
		} else {
			due := time.Now().Add(r.Wait)
			if err := sleep(ctx, r.Wait); err != nil {
				l.cancelBooking(items, res, r.Wait)
			} else {
				l.m.lateness.Observe(max(time.Since(due), 0).Seconds())
			}
		}
	}
	if res.Allowed && !req.Peek && (req.Receipt || req.Reserve) {
		for i := range items {
			if it := &items[i]; !it.Spec.HoldsSlots() && !res.Limits[i].ShadowRefused && (it.Cost > 0 || req.Costs != nil) && !skipped(ruleAt(rules, i)) {
				res.Receipt.taken = append(res.Receipt.taken, store.Adjustment{Key: it.Key, Spec: it.Spec, Base: it.Base, Delta: it.Cost, RefundBefore: it.RefundBefore})
				res.Receipt.limits = append(res.Receipt.limits, c.p.Limits[which[i]].Name)
			}
		}
		if len(res.Receipt.taken) > 0 {
			res.Receipt.settled = new(atomic.Bool)
		}
	}
	l.observe(ctx, c, which, res, req, start, timed)
	return nil
}

// take decides items in the store: all of them at once, all or nothing;
// with shadow limits, the enforced ones all or nothing, then each shadow
// one on its own (so that its refusal refuses nothing, and takes nothing),
// peeked when the request was refused or when it is an in-flight cap (a
// shadow cap holds no slot).
//
// Items whose override decides them (rules: deny, unlimited) are not
// taken from the store (decideSkipped); a deny that is not shadow refuses
// the request, whose enforced items are then peeked.
//
// now is the check's clock reading (nil: none): a store that takes one
// (timedTaker) decides at it instead of reading the clock again.
func (l *Limiter) take(ctx context.Context, c *compiled, items []store.Item, which []int, rules []*overrides.Rule, borrows bool, now *time.Time) (store.Result, error) {
	if c.adapt != nil { // (adaptive limits: limiter/adaptive.go)
		return l.takeAdaptive(ctx, c, items, which, rules, borrows, now)
	}
	if !c.anyShadow && rules == nil { // (the common case: no closure on the hot path)
		if borrows {
			if now != nil && l.tt != nil {
				return l.tt.TakeBorrowedAt(ctx, items, *now)
			}
			return l.kb.TakeBorrowed(ctx, items)
		}
		return l.st.Take(ctx, items)
	}
	take := func(its []store.Item) (store.Result, error) {
		if borrows {
			if now != nil && l.tt != nil {
				return l.tt.TakeBorrowedAt(ctx, its, *now)
			}
			return l.kb.TakeBorrowed(ctx, its)
		}
		return l.st.Take(ctx, its)
	}
	shadow := func(j int) bool {
		r := ruleAt(rules, j)
		return c.shadow[which[j]] || r != nil && r.Shadow()
	}
	denied := false
	enforced := make([]store.Item, 0, len(items))
	at := make([]int, 0, len(items))
	for j := range items {
		if r := ruleAt(rules, j); skipped(r) {
			decideSkipped(&items[j], r)
			denied = denied || r.Deny() && !shadow(j)
		} else if !shadow(j) {
			enforced, at = append(enforced, items[j]), append(at, j)
		}
	}
	r := store.Result{Allowed: true}
	if denied {
		for k := range enforced {
			enforced[k].Cost, enforced[k].MaxWait = 0, 0
		}
	}
	if len(enforced) > 0 {
		var err error
		if r, err = take(enforced); err != nil {
			return r, err
		}
		for k, j := range at {
			items[j] = enforced[k]
		}
	}
	if denied {
		r = store.Result{Allowed: false}
	}
	for j := range items {
		if !shadow(j) || skipped(ruleAt(rules, j)) {
			continue
		}
		l.decideShadow(items[j:j+1], c.p.Limits[which[j]].Name, !r.Allowed, take)
	}
	return r, nil
}

// cancelBooking returns a booking whose caller gave up (its ctx ended
// while it waited wait) exactly, and turns res into the refusal it
// reports: the slots released, each booked limit refused with the wait it
// had booked (RetryAfter: from the decision, not from now).
func (l *Limiter) cancelBooking(items []store.Item, res *Result, wait time.Duration) {
	adj := make([]store.Adjustment, 0, len(items))
	for _, it := range items {
		if !it.Spec.HoldsSlots() && it.Cost > 0 && it.Decision.Allowed { // (a shadow limit that refused took nothing)
			adj = append(adj, store.Adjustment{Key: it.Key, Spec: it.Spec, Base: it.Base, Delta: -it.Cost, RefundBefore: it.RefundBefore})
		}
	}
	// A fresh context: the caller's has ended, and the tokens must go back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.st.Adjust(ctx, adj); err != nil {
		l.logf(slog.LevelError, "rate limit: a cancelled booking could not be returned", slog.String("error", err.Error()))
	}
	if res.Slots.ID != "" {
		l.st.Release(ctx, res.Slots)
		res.Slots = store.Slots{}
	}
	res.Allowed, res.RetryAfter = false, wait
	for i := range items {
		if items[i].Wait > 0 {
			st := &res.Limits[i]
			st.Allowed, st.RetryAfter = false, items[i].Wait
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release frees in-flight slots.
func (l *Limiter) Release(ctx context.Context, slots store.Slots) error {
	if slots.ID == "" {
		return nil
	}
	return l.st.Release(ctx, slots)
}
