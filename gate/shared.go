package gate

// A gate shared through a store (Config.Store): its budgets, in-flight
// slots and pauses live in the store under the gate's name, so that every
// gate of that name on that store, in any process, shares them.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/store"
)

// DefaultLeaseTTL is the default of Config.LeaseTTL: how long a shared
// gate's in-flight slot outlives a worker that crashed holding it.
const DefaultLeaseTTL = 30 * time.Second

// MaxSharedWait is the longest a caller of a shared gate may wait for
// admission: a later one is refused with sluice.ErrWaitTooLong even when
// neither MaxWait nor the context's deadline is that short.
const MaxSharedWait = 24 * time.Hour

// slotPollMax bounds the pause between two attempts of a caller that waits
// for an in-flight slot of a shared gate (a slot freed by another process
// sends no signal; one freed by this process wakes a waiter at once).
const slotPollMax = 50 * time.Millisecond

var gateKeyEsc = keyesc.NewSet(":{}")

// shared is a gate's state in a store.
type shared struct {
	st      store.Store
	specs   []*store.Spec // the budgets: requests (Limit), then Dimensions in order
	keys    []string
	slots   *store.Spec // in-flight slots; nil without MaxInFlight
	slotKey string
	ttl     time.Duration
	waiting atomic.Int64   // callers of this process waiting (MaxQueue)
	freed   chan struct{}  // a slot of this process was released: wakes one waiter
	last    []atomic.Int64 // each budget's Remaining after this process's last decision
	lastAt  atomic.Int64   // that decision's time (Unix ns)
}

// newShared checks cfg for a shared gate and compiles its specs. The keys
// are "gate:{NAME}:requests", "gate:{NAME}:d:DIMENSION" and
// "gate:{NAME}:in_flight" (NAME and DIMENSION with ':', '{', '}' and '%'
// escaped as %XX), in one Redis Cluster hash slot.
func newShared(cfg Config, name string) (*shared, error) {
	switch {
	case cfg.StartEmpty:
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "gate config: StartEmpty does not apply with a Store (the buckets live in the store and start full there)")
	case cfg.LeaseTTL < 0:
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "gate config: LeaseTTL %v must not be negative", cfg.LeaseTTL)
	}
	if cfg.MaxInFlight > 0 && !store.CanRenew(cfg.Store) {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "gate config: Store %T cannot renew leases (store.CanRenew), which MaxInFlight needs", cfg.Store)
	}
	base := "gate:{" + string(gateKeyEsc.Append(nil, name)) + "}:"
	sh := &shared{st: cfg.Store, ttl: cfg.LeaseTTL, freed: make(chan struct{}, 1)}
	if sh.ttl == 0 {
		sh.ttl = DefaultLeaseTTL
	}
	sp, err := store.NewBucketSpec(cfg.Limit)
	if err != nil {
		return nil, fmt.Errorf("gate config: Limit: %w", err)
	}
	sh.specs, sh.keys = append(sh.specs, sp), append(sh.keys, base+"requests")
	for _, d := range cfg.Dimensions {
		sp, err := store.NewBucketSpec(d.Limit)
		if err != nil {
			return nil, fmt.Errorf("gate config: Dimensions %q: %w", d.Name, err)
		}
		sh.specs = append(sh.specs, sp)
		sh.keys = append(sh.keys, base+"d:"+string(gateKeyEsc.Append(nil, d.Name)))
	}
	if cfg.MaxInFlight > 0 {
		sh.slots = &store.Spec{Kind: store.Concurrency, MaxInFlight: int64(cfg.MaxInFlight), LeaseTTL: sh.ttl}
		sh.slotKey = base + "in_flight"
	}
	sh.last = make([]atomic.Int64, len(sh.specs))
	for i, sp := range sh.specs {
		sh.last[i].Store(sp.Capacity())
	}
	return sh, nil
}

// items are the store items of a call of cost (and ch per dimension; nil:
// none): each budget charged (cost 0: left out), then a slot.
func (sh *shared) items(cost int64, ch []int64) ([]store.Item, []int) {
	items := make([]store.Item, 0, len(sh.specs)+1)
	at := make([]int, 0, len(sh.specs)) // budget index of each item
	for i, sp := range sh.specs {
		c := cost
		if i > 0 {
			c = 0
			if ch != nil {
				c = ch[i-1]
			}
		}
		if c > 0 || i == 0 {
			items = append(items, store.Item{Key: sh.keys[i], Spec: sp, Cost: c})
			at = append(at, i)
		}
	}
	if sh.slots != nil {
		items = append(items, store.Item{Key: sh.slotKey, Spec: sh.slots, Cost: 1})
	}
	return items, at
}

// sharedHold is what an admission of a shared gate holds: its bookings
// (to settle or cancel) and its slot's lease (renewed while it is held).
type sharedHold struct {
	g       *Gate
	costs   []int64 // per budget
	before  []int64 // per budget: RefundBefore
	settled []bool
	lease   store.Lease
	mu      sync.Mutex
	renew   *time.Timer
	done    bool
}

// acquireShared admits a call of a shared gate: one Take that books the
// call in the store's line (FIFO across processes) within the wait the
// caller may afford, then a local sleep until its turn. A call refused
// only for want of an in-flight slot tries again (woken by a slot this
// process frees, else after a short jittered pause) until its wait runs
// out.
func (g *Gate) acquireShared(ctx context.Context, cost int64, attempt int, ch []int64) (*sharedHold, error) {
	sh := g.sh
	start := time.Now()
	limit := start.Add(min(g.budget(ctx, start), MaxSharedWait))
	queued := false
	defer func() {
		if queued {
			sh.waiting.Add(-1)
		}
	}()
	if pause := g.localPause(start); pause > limit.Sub(start) {
		err := sluice.Errorf(sluice.ErrWaitTooLong, "%q is paused by a server hint for %v, more than the %v allowed", g.name, pause, limit.Sub(start))
		g.reject(err, "wait_too_long", cost, attempt, 0)
		return nil, err
	}
	for poll := 0; ; poll++ {
		if !queued && g.cfg.MaxQueue > 0 {
			queued = sh.enter(g.cfg.MaxQueue)
		}
		items, at := sh.items(cost, ch)
		maxWait := time.Duration(0)
		if queued {
			maxWait = max(time.Until(limit), 0)
		}
		for i := range items {
			items[i].MaxWait = maxWait
		}
		res, err := sh.st.Take(ctx, items)
		if err != nil {
			err = fmt.Errorf("gate %q: store: %w", g.name, err)
			g.reject(err, "store_error", cost, attempt, time.Since(start))
			return nil, err
		}
		sh.note(items, at)
		if res.Allowed {
			return g.admitShared(ctx, sh.hold(g, items, at, res), res.Wait, cost, attempt, start, limit)
		}
		why, retry := sh.refusal(items)
		if why == "slot" && queued && time.Until(limit) > 0 {
			if err := sh.awaitSlot(ctx, poll, min(retry, time.Until(limit))); err != nil {
				g.reject(err, "canceled", cost, attempt, time.Since(start))
				return nil, err
			}
			continue
		}
		err = g.sharedRefusal(queued, why, retry, limit.Sub(start))
		reason := "wait_too_long"
		if !queued {
			reason = "queue_full"
		}
		g.reject(err, reason, cost, attempt, time.Since(start))
		return nil, err
	}
}

// enter takes a waiting place of this process if one of max is free.
func (sh *shared) enter(max int) bool {
	for {
		n := sh.waiting.Load()
		if n >= int64(max) {
			return false
		}
		if sh.waiting.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// note records the budgets' Remaining after a decision, for Stats.
func (sh *shared) note(items []store.Item, at []int) {
	for j, i := range at {
		sh.last[i].Store(items[j].Decision.Remaining)
	}
	sh.lastAt.Store(time.Now().UnixNano())
}

// refusal says why a Take was refused: "slot" when only the in-flight cap
// refused (then retry is its RetryAfter), else "budget" (retry: the
// largest RetryAfter of the budgets that refused).
func (sh *shared) refusal(items []store.Item) (why string, retry time.Duration) {
	why = "slot"
	for _, it := range items {
		if it.Decision.Allowed {
			continue
		}
		if it.Spec.HoldsSlots() {
			retry = max(retry, it.Decision.RetryAfter)
			continue
		}
		if why == "slot" {
			why, retry = "budget", 0
		}
		retry = max(retry, it.Decision.RetryAfter)
	}
	return why, retry
}

// sharedRefusal is the error of a refused call: no waiting place (or
// MaxQueue 0), or a turn later than the wait allowed.
func (g *Gate) sharedRefusal(queued bool, why string, retry, allowed time.Duration) error {
	switch {
	case !queued && g.cfg.MaxQueue == 0:
		return sluice.Errorf(sluice.ErrQueueFull, "%q: cannot wait: MaxQueue is 0, so no caller may wait (set Config.MaxQueue to let callers queue)", g.name)
	case !queued:
		return sluice.Errorf(sluice.ErrQueueFull, "%q: %d callers of this process already wait (MaxQueue %d)", g.name, g.cfg.MaxQueue, g.cfg.MaxQueue)
	case why == "slot":
		return sluice.Errorf(sluice.ErrWaitTooLong, "%q: no in-flight slot came free within the wait allowed (%v)", g.name, allowed)
	}
	return sluice.Errorf(sluice.ErrWaitTooLong, "%q: admission in %v would exceed the wait allowed (%v)", g.name, retry, allowed)
}

// awaitSlot sleeps before another try for a slot: until this process frees
// one, or a jittered pause growing with poll (at most d), or ctx's end.
func (sh *shared) awaitSlot(ctx context.Context, poll int, d time.Duration) error {
	p := min(time.Millisecond<<min(poll, 6), slotPollMax)
	p = p/2 + rand.N(p/2+1)
	if d > 0 {
		p = min(p, d)
	}
	t := time.NewTimer(p)
	defer t.Stop()
	select {
	case <-sh.freed:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// hold is the sharedHold of an admitted Take.
func (sh *shared) hold(g *Gate, items []store.Item, at []int, res store.Result) *sharedHold {
	h := &sharedHold{g: g, costs: make([]int64, len(sh.specs)), before: make([]int64, len(sh.specs)),
		settled: make([]bool, len(sh.specs)), lease: res.Lease}
	for j, i := range at {
		h.costs[i], h.before[i] = items[j].Cost, items[j].RefundBefore
	}
	return h
}

// admitShared sleeps until an admitted call's turn (wait after the
// decision, and the end of a pause this process learnt of since), then
// counts it and starts renewing its slot. A ctx that ends first, or a
// pause past limit, returns the booking exactly.
func (g *Gate) admitShared(ctx context.Context, h *sharedHold, wait time.Duration, cost int64, attempt int, start, limit time.Time) (*sharedHold, error) {
	at := time.Now().Add(wait)
	for {
		if p := g.localPause(time.Now()); time.Now().Add(p).After(at) {
			at = time.Now().Add(p)
		}
		if at.After(limit) {
			h.cancel()
			err := sluice.Errorf(sluice.ErrWaitTooLong, "%q: a server hint pauses it past the wait allowed (%v)", g.name, limit.Sub(start))
			g.reject(err, "wait_too_long", cost, attempt, time.Since(start))
			return nil, err
		}
		d := time.Until(at)
		if d <= 0 {
			break
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			h.cancel()
			g.reject(ctx.Err(), "canceled", cost, attempt, time.Since(start))
			return nil, ctx.Err()
		}
	}
	g.inFlight.Add(1)
	g.countAdmitted(attempt)
	g.observe("admitted", "", cost, attempt, time.Since(start))
	h.startRenewing()
	return h, nil
}

// localPause is how long from now a pause this process knows of lasts.
func (g *Gate) localPause(now time.Time) time.Duration {
	if !g.paused.Load() {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.pausedUntil.Sub(now), 0)
}

// startRenewing renews the slot's lease every third of its TTL while held.
func (h *sharedHold) startRenewing() {
	if h.lease.ID == "" {
		return
	}
	sh := h.g.sh
	every := sh.ttl / 3
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renew = time.AfterFunc(every, func() {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := store.Renew(ctx, sh.st, h.lease, sh.ttl)
		cancel()
		if err != nil {
			h.g.logWarn("gate: renewing an in-flight slot failed (it returns at its TTL if this goes on)", err)
		}
		h.mu.Lock()
		if !h.done {
			h.renew.Reset(every)
		}
		h.mu.Unlock()
	})
}

// settle settles budget i with actual: the difference to what it took is
// returned (exactly, before its RefundBefore) or charged into debt.
func (h *sharedHold) settle(i int, actual int64) error {
	if actual < 0 {
		return sluice.Errorf(sluice.ErrInvalidCost, "actual cost %d is negative", actual)
	}
	h.mu.Lock()
	if h.settled[i] {
		h.mu.Unlock()
		return fmt.Errorf("gate %q: %s already settled", h.g.name, h.g.budgetName(i))
	}
	h.settled[i] = true
	h.mu.Unlock()
	delta := actual - h.costs[i]
	if delta == 0 {
		return nil
	}
	sh := h.g.sh
	err := sh.st.Adjust(context.Background(), []store.Adjustment{{Key: sh.keys[i], Spec: sh.specs[i], Delta: delta, RefundBefore: h.before[i]}})
	if err != nil {
		return fmt.Errorf("gate %q: settle %s: %w", h.g.name, h.g.budgetName(i), err)
	}
	return nil
}

// cancel returns a booking that was not used (exactly) and its slot.
func (h *sharedHold) cancel() {
	sh := h.g.sh
	var adj []store.Adjustment
	for i, c := range h.costs {
		if c > 0 {
			adj = append(adj, store.Adjustment{Key: sh.keys[i], Spec: sh.specs[i], Delta: -c, RefundBefore: h.before[i]})
		}
	}
	ctx := context.Background()
	if err := sh.st.Adjust(ctx, adj); err != nil {
		h.g.logWarn("gate: returning a cancelled booking failed", err)
	}
	if h.lease.ID != "" {
		if err := sh.st.Release(ctx, h.lease); err != nil {
			h.g.logWarn("gate: releasing an in-flight slot failed (it returns at its TTL)", err)
		}
	}
}

// release frees the slot of an admitted call; it runs once per hold.
func (h *sharedHold) release() {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return
	}
	h.done = true
	if h.renew != nil {
		h.renew.Stop()
	}
	h.mu.Unlock()
	sh := h.g.sh
	h.g.inFlight.Add(-1)
	if h.lease.ID != "" {
		if err := sh.st.Release(context.Background(), h.lease); err != nil {
			h.g.logWarn("gate: releasing an in-flight slot failed (it returns at its TTL)", err)
		}
		select {
		case sh.freed <- struct{}{}:
		default:
		}
	}
}

// adjustShared applies an adjustment to budget i of a shared gate (a pause
// or a charge), logging a failure: the callers (Pause, Lower) have no
// error to return.
func (g *Gate) adjustShared(i int, a store.Adjustment) {
	a.Key, a.Spec = g.sh.keys[i], g.sh.specs[i]
	if err := g.sh.st.Adjust(context.Background(), []store.Adjustment{a}); err != nil {
		g.logWarn("gate: a store adjustment failed ("+g.budgetName(i)+")", err)
	}
}

// lowerShared lowers budget i in the store to at most remaining: a peek
// reads what it holds, the excess is charged. It skips the store when
// remaining cannot be lower than what the store holds: not below what this
// process's last decision left plus the refill since (other workers only
// take from it, but for their refunds), or the capacity.
func (g *Gate) lowerShared(i int, remaining int64) {
	sh := g.sh
	l := g.limit
	if i > 0 {
		l = g.dims[i-1].limit
	}
	since := float64(time.Now().UnixNano()-sh.lastAt.Load()) / 1e9
	if bound := float64(sh.last[i].Load()) + l.Rate*since; float64(remaining) >= min(bound, float64(l.Capacity)) {
		return
	}
	it := []store.Item{{Key: sh.keys[i], Spec: sh.specs[i]}}
	if _, err := sh.st.Take(context.Background(), it); err != nil {
		g.logWarn("gate: reading a budget from the store failed ("+g.budgetName(i)+")", err)
		return
	}
	if excess := it[0].Decision.Remaining - max(remaining, 0); excess > 0 {
		g.adjustShared(i, store.Adjustment{Delta: excess})
	}
}

// budgetName is budget i's name: "requests", then the dimensions'.
func (g *Gate) budgetName(i int) string {
	if i == 0 {
		return "requests"
	}
	return g.dims[i-1].name
}
