// A gate shared through a store (Config.Store): its budgets, in-flight
// slots and pauses live in the store under the gate's name, so that every
// gate of that name on that store, in any process, shares them.

package gate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// DefaultSlotTTL is the default of Config.SlotTTL: how long a shared
// gate's in-flight slot outlives a worker that crashed holding it.
const DefaultSlotTTL = 30 * time.Second

// MinSlotTTL is the shortest Config.SlotTTL: a slot is renewed every
// third of it, each renewal a store round trip.
const MinSlotTTL = 30 * time.Millisecond

// DefaultLeaseTTL is the former name of DefaultSlotTTL.
//
// Deprecated: use DefaultSlotTTL.
const DefaultLeaseTTL = DefaultSlotTTL

// MinLeaseTTL is the former name of MinSlotTTL.
//
// Deprecated: use MinSlotTTL.
const MinLeaseTTL = MinSlotTTL

// MaxSharedWait is the longest a caller of a shared gate may wait for
// admission: a later one is refused with sluice.ErrWaitTooLong even when
// neither MaxWait nor the context's deadline is that short.
const MaxSharedWait = 24 * time.Hour

// slotPollMax bounds the pause between two attempts of a caller that waits
// for an in-flight slot of a shared gate (a slot freed by another process
// sends no signal; one freed by this process wakes a waiter at once).
const slotPollMax = 50 * time.Millisecond

var gateKeyEsc = keyesc.NewSet(keyesc.PolicyKey)

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
	ad      *adaptive      // Config.Adaptive's ceiling, kept in the store; nil: none
}

// newShared checks cfg for a shared gate and compiles its specs. The keys
// are "gate:{NAME}:requests", "gate:{NAME}:d:DIMENSION" and
// "gate:{NAME}:in_flight" (NAME and DIMENSION with ':', '{', '}' and '%'
// escaped as %XX), in one Redis Cluster hash slot.
func newShared(cfg Config, name string) (*shared, error) {
	if cfg.SlotTTL == 0 {
		cfg.SlotTTL = cfg.LeaseTTL // the deprecated name
	}
	switch {
	case cfg.StartEmpty:
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "gate config: StartEmpty does not apply with a Store (the buckets live in the store and start full there)")
	case cfg.SlotTTL < 0 || cfg.SlotTTL > 0 && cfg.SlotTTL < MinSlotTTL:
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "gate config: SlotTTL %v must be 0 (the default, %v) or at least %v", cfg.SlotTTL, DefaultSlotTTL, MinSlotTTL)
	}
	if cfg.MaxInFlight > 0 && !store.CanRenew(cfg.Store) {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "gate config: Store %T cannot renew slots (store.CanRenew), which MaxInFlight needs", cfg.Store)
	}
	base := sharedBase(name)
	sh := &shared{st: cfg.Store, ttl: cfg.SlotTTL, freed: make(chan struct{}, 1)}
	if sh.ttl == 0 {
		sh.ttl = DefaultSlotTTL
	}
	sp, err := store.NewBucketSpec(cfg.Limit)
	if err != nil {
		return nil, fmt.Errorf("gate config: Limit: %w", err)
	}
	fs := cfg.FairShare.storeShare() // (nil: none)
	sp.FairShare = fs
	sh.specs, sh.keys = append(sh.specs, sp), append(sh.keys, base+"requests")
	for _, d := range cfg.Dimensions {
		sp, err := store.NewBucketSpec(d.Limit)
		if err != nil {
			return nil, fmt.Errorf("gate config: Dimensions %q: %w", d.Name, err)
		}
		sp.FairShare = fs
		sh.specs = append(sh.specs, sp)
		sh.keys = append(sh.keys, base+"d:"+string(gateKeyEsc.Append(nil, d.Name)))
	}
	if cfg.MaxInFlight > 0 {
		sh.slots = &store.Spec{Kind: store.Concurrency, MaxInFlight: int64(cfg.MaxInFlight), SlotTTL: sh.ttl}
		sh.slotKey = base + "in_flight"
	}
	sh.last = make([]atomic.Int64, len(sh.specs))
	for i, sp := range sh.specs {
		sh.last[i].Store(sp.Capacity())
	}
	return sh, nil
}

// items are the store items of a call of cost (and ch per dimension; nil:
// none): the requests budget (even at cost 0: a peek, so that such a call
// waits behind the line), each dimension charged, then a slot; booking up
// to limit when queued.
func (sh *shared) items(cost int64, ch []int64, queued bool, limit time.Time) ([]store.Item, []int) {
	maxWait := time.Duration(0)
	if queued {
		maxWait = max(time.Until(limit), 0)
	}
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
			items = append(items, store.Item{Key: sh.keys[i], Spec: sp, Cost: c, MaxWait: maxWait})
			at = append(at, i)
		}
	}
	if sh.slots != nil {
		items = append(items, store.Item{Key: sh.slotKey, Spec: sh.slots, Cost: 1, MaxWait: maxWait})
	}
	if sh.ad != nil {
		items = sh.ad.items(items)
	}
	return items, at
}

// sharedHold is what an admission of a shared gate holds: its bookings
// (to settle or cancel) and its slot (renewed while it is held).
type sharedHold struct {
	g       *Gate
	costs   []int64 // per budget
	before  []int64 // per budget: RefundBefore
	settled []uint8 // per budget: 0 not settled, 1 being settled, 2 settled
	slots   store.Slots
	mu      sync.Mutex
	renew   *time.Timer
	done    bool
}

// acquireShared admits a call of a shared gate: one Take that books the
// call in the store's line (FIFO across processes) within the wait the
// caller may afford, then a local sleep until its turn. A call refused
// only for want of an in-flight slot (or, at cost 0, behind the line)
// tries again (woken by a slot this process frees, else after a short
// jittered pause) until its wait runs out. The Take does not end with
// ctx: a caller that gives up during it returns what it booked.
func (g *Gate) acquireShared(ctx context.Context, cost int64, attempt int, ch []int64) (*sharedHold, error) {
	sh := g.sh
	start := time.Now()
	limit := start.Add(min(g.budget(ctx, start), MaxSharedWait))
	cls, _ := ctx.Value(classKey{}).(policy.Priority) // (Priority: the call's class)
	if q := start.Add(cls.MaxQueue); cls.QueueBounded && q.Before(limit) {
		limit = q
	}
	queued := false // holds one of this process's MaxQueue places
	defer func() {
		if queued {
			sh.waiting.Add(-1)
		}
	}()
	if pause := g.pauseFor(ch); g.cfg.MaxQueue > 0 && pause > limit.Sub(start) {
		err := sluice.Errorf(sluice.ErrWaitTooLong, "%q is paused by a server hint for %v, more than the %v allowed", g.name, pause, limit.Sub(start))
		g.reject(err, ReasonWaitTooLong, cost, attempt, 0)
		return nil, err
	}
	for poll := 0; ; poll++ {
		if !queued && g.cfg.MaxQueue > 0 {
			queued = sh.enter(g.cfg.MaxQueue)
		}
		items, at := sh.items(cost, ch, queued, limit)
		for i := range items { // (the class's reserve: the same on every item of the request)
			items[i].Reserve = cls.Reserve
		}
		g.shareItems(ctx, cls, items)
		res, err := sh.st.Take(context.WithoutCancel(ctx), items)
		answered := time.Now() // (a booked wait counts from the store's answer: store.Item.Wait)
		switch {
		case err != nil && ctx.Err() != nil:
			g.reject(ctx.Err(), ReasonCanceled, cost, attempt, time.Since(start))
			return nil, ctx.Err()
		case err != nil:
			err = fmt.Errorf("gate %q: store: %w", g.name, err)
			g.reject(err, ReasonStoreError, cost, attempt, time.Since(start))
			return nil, err
		}
		sh.note(items, at)
		if res.Allowed {
			h := sh.hold(g, items, at, res)
			if queued && res.Wait == 0 {
				sh.waiting.Add(-1) // admitted at once: its place goes back now
				queued = false
			}
			if ctx.Err() != nil {
				h.cancel()
				g.reject(ctx.Err(), ReasonCanceled, cost, attempt, time.Since(start))
				return nil, ctx.Err()
			}
			return g.admitShared(ctx, h, answered.Add(res.Wait), ch, cost, attempt, start, limit)
		}
		why, retry := sh.refusal(items)
		if !queued && g.cfg.MaxQueue > 0 && sh.enter(g.cfg.MaxQueue) {
			queued = true // a place came free meanwhile: ask again, booking
			continue
		}
		if queued && why != "budget" && time.Until(limit) > 0 {
			if err := sh.await(ctx, poll, min(retry, time.Until(limit))); err != nil {
				g.reject(err, ReasonCanceled, cost, attempt, time.Since(start))
				return nil, err
			}
			continue
		}
		err = g.sharedRefusal(queued, why, retry, limit.Sub(start))
		reason := ReasonWaitTooLong
		if !queued {
			reason = ReasonQueueFull
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
	if sh.ad != nil {
		sh.ad.note(items)
	}
	for j, i := range at {
		sh.last[i].Store(items[j].Decision.Remaining)
	}
}

// refusal says why a Take was refused: "budget" when a budget could not
// book its cost within the wait allowed (retry: the largest RetryAfter of
// those), else "slot" when the in-flight cap refused, or "peek" when a
// cost-0 peek did (a line or a pause ahead); retry is then when to ask
// again.
func (sh *shared) refusal(items []store.Item) (why string, retry time.Duration) {
	why = "slot"
	budget := false
	for _, it := range items {
		switch {
		case it.Decision.Allowed:
		case it.Cost > 0 && !it.Spec.HoldsSlots():
			if !budget {
				budget, retry = true, 0
			}
			retry = max(retry, it.Decision.RetryAfter)
		case budget:
		case it.Spec.HoldsSlots():
			retry = max(retry, it.Decision.RetryAfter)
		default:
			why, retry = "peek", max(retry, it.Decision.RetryAfter)
		}
	}
	if budget {
		why = "budget"
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
	case why == "peek":
		return sluice.Errorf(sluice.ErrWaitTooLong, "%q: the callers ahead were not served within the wait allowed (%v)", g.name, allowed)
	}
	return sluice.Errorf(sluice.ErrWaitTooLong, "%q: admission in %v would exceed the wait allowed (%v)", g.name, retry, allowed)
}

// await sleeps before another try: until this process frees a slot, or a
// jittered pause growing with poll (at most d, when d is positive), or
// ctx's end.
func (sh *shared) await(ctx context.Context, poll int, d time.Duration) error {
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

// hold is the sharedHold of an admitted Take. Its slot is renewed from
// now on, so that it is held while its caller sleeps until its turn too.
func (sh *shared) hold(g *Gate, items []store.Item, at []int, res store.Result) *sharedHold {
	h := &sharedHold{g: g, costs: make([]int64, len(sh.specs)), before: make([]int64, len(sh.specs)),
		settled: make([]uint8, len(sh.specs)), slots: res.Slots}
	for j, i := range at {
		h.costs[i], h.before[i] = items[j].Cost, items[j].RefundBefore
	}
	h.startRenewing()
	return h
}

// admitShared sleeps until an admitted call's turn (booked: its booking's
// time; later if a pause this process knows of, of the gate or of a
// dimension the call charges, ends later), then counts it. A ctx that ends
// first, or such a pause past limit, returns the booking exactly.
func (g *Gate) admitShared(ctx context.Context, h *sharedHold, booked time.Time, ch []int64, cost int64, attempt int, start, limit time.Time) (*sharedHold, error) {
	for {
		at := booked
		if p := g.pauseFor(ch); p > 0 && time.Now().Add(p).After(at) {
			at = time.Now().Add(p)
			if at.After(limit) {
				h.cancel()
				err := sluice.Errorf(sluice.ErrWaitTooLong, "%q: a server hint pauses it for %v, past the wait allowed (%v)", g.name, p, limit.Sub(start))
				g.reject(err, ReasonWaitTooLong, cost, attempt, time.Since(start))
				return nil, err
			}
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
			g.reject(ctx.Err(), ReasonCanceled, cost, attempt, time.Since(start))
			return nil, ctx.Err()
		}
	}
	g.inFlight.Add(1)
	g.countAdmitted(attempt)
	g.observe(ResultAdmitted, "", cost, attempt, time.Since(start))
	return h, nil
}

// pauseFor is how long from now a pause this process knows of holds a
// call charging ch (nil: none): the gate's, or a charged dimension's.
func (g *Gate) pauseFor(ch []int64) time.Duration {
	now := g.now()
	var p time.Duration
	if g.paused.Load() {
		g.mu.Lock()
		p = g.pausedUntil.Sub(now)
		g.mu.Unlock()
	}
	if end := g.dimPauseEnd(ch); !end.IsZero() {
		p = max(p, end.Sub(now))
	}
	return max(p, 0)
}

// startRenewing renews the slot every third of its TTL while held.
func (h *sharedHold) startRenewing() {
	if h.slots.ID == "" {
		return
	}
	sh := h.g.sh
	every := sh.ttl / 3
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renew = time.AfterFunc(every, func() {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := store.Renew(ctx, sh.st, h.slots, sh.ttl)
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
// returned (exactly, before its RefundBefore) or charged into debt. Once
// per budget; a settle whose store write failed may be tried again.
func (h *sharedHold) settle(i int, actual int64) error {
	if actual < 0 {
		return sluice.Errorf(sluice.ErrInvalidCost, "actual cost %d is negative", actual)
	}
	h.mu.Lock()
	if h.settled[i] != 0 {
		h.mu.Unlock()
		return fmt.Errorf("gate %q: %s already settled", h.g.name, h.g.budgetName(i))
	}
	h.settled[i] = 1
	h.mu.Unlock()
	var err error
	if delta := actual - h.costs[i]; delta != 0 {
		sh := h.g.sh
		adj := []store.Adjustment{{Key: sh.keys[i], Spec: sh.specs[i], Delta: delta, RefundBefore: h.before[i]}}
		sh.ad.rebase(sh, adj)
		err = sh.st.Adjust(context.Background(), adj)
	}
	h.mu.Lock()
	h.settled[i] = 2
	if err != nil {
		h.settled[i] = 0
	}
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("gate %q: settle %s: %w", h.g.name, h.g.budgetName(i), err)
	}
	return nil
}

// cancel returns a booking that was not used (exactly) and its slot.
func (h *sharedHold) cancel() {
	if !h.stop() {
		return
	}
	sh := h.g.sh
	var adj []store.Adjustment
	for i, c := range h.costs {
		if c > 0 {
			adj = append(adj, store.Adjustment{Key: sh.keys[i], Spec: sh.specs[i], Delta: -c, RefundBefore: h.before[i]})
		}
	}
	sh.ad.rebase(sh, adj)
	if err := sh.st.Adjust(context.Background(), adj); err != nil {
		h.g.logWarn("gate: returning a cancelled booking failed", err)
	}
	h.freeSlot()
}

// stop ends the hold's renewals; false when it had ended already.
func (h *sharedHold) stop() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	h.done = true
	if h.renew != nil {
		h.renew.Stop()
	}
	return true
}

// freeSlot releases the hold's slot, if it took one, and wakes a caller of
// this process waiting for one.
func (h *sharedHold) freeSlot() {
	if h.slots.ID == "" {
		return
	}
	sh := h.g.sh
	if err := sh.st.Release(context.Background(), h.slots); err != nil {
		h.g.logWarn("gate: releasing an in-flight slot failed (it returns at its TTL)", err)
	}
	select {
	case sh.freed <- struct{}{}:
	default:
	}
}

// release frees the slot of an admitted call; it runs once per hold.
func (h *sharedHold) release() {
	if !h.stop() {
		return
	}
	h.g.inFlight.Add(-1)
	h.freeSlot()
}

// adjustShared applies an adjustment to budget i of a shared gate (a pause
// or a ceiling), logging a failure: the callers (Pause, Lower) have no
// error to return.
func (g *Gate) adjustShared(i int, a store.Adjustment) {
	a.Key, a.Spec = g.sh.keys[i], g.sh.specs[i]
	adj := []store.Adjustment{a}
	g.sh.ad.rebase(g.sh, adj)
	if err := g.sh.st.Adjust(context.Background(), adj); err != nil {
		g.logWarn("gate: a store adjustment failed ("+g.budgetName(i)+")", err)
	}
}

// lowerShared lowers the budgets of cs (all known) in the store, each to
// at most its ceiling, in one store call of atomic ceilings
// (store.Adjustment.Lower); a ceiling at or above the budget's capacity
// cannot lower anything and is not sent. A failure is logged.
func (g *Gate) lowerShared(cs []Ceiling) {
	adj := make([]store.Adjustment, 0, len(cs))
	idx := make([]int, 0, len(cs))
	for _, c := range cs {
		i := g.budgetIndex(c.Dimension)
		if c.Remaining >= g.sh.specs[i].Capacity() {
			continue
		}
		adj = append(adj, store.Adjustment{Key: g.sh.keys[i], Spec: g.sh.specs[i], Lower: true, Delta: max(c.Remaining, 0)})
		idx = append(idx, i)
	}
	if len(adj) == 0 {
		return
	}
	g.sh.ad.rebase(g.sh, adj)
	if err := g.sh.st.Adjust(context.Background(), adj); err != nil {
		names := make([]string, len(idx))
		for k, i := range idx {
			names[k] = g.budgetName(i)
		}
		g.logWarn("gate: a store adjustment failed ("+strings.Join(names, ", ")+")", err)
	}
	for k, i := range idx {
		g.sh.last[i].Store(min(g.sh.last[i].Load(), adj[k].Delta))
	}
}

// sharedBase is the prefix of a shared gate's keys: "gate:{NAME}:" (NAME
// escaped).
func sharedBase(name string) string { return "gate:{" + string(gateKeyEsc.Append(nil, name)) + "}:" }

// budgetName is budget i's name: "requests", then the dimensions'.
func (g *Gate) budgetName(i int) string {
	if i == 0 {
		return "requests"
	}
	return g.dims[i-1].name
}
