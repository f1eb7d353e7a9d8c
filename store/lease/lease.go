// Package lease is token leasing over a shared store: an instance takes a
// batch of tokens for a hot key from the shared store (Redis) in one round
// trip and spends them locally, so most decisions on hot keys cost no round
// trip.
//
// Bounds (docs/behaviour.md section 5.3):
//
//   - Never over-admits: every token spent locally was first taken from
//     the shared bucket, and is spent only while the shared bucket could
//     not yet have refilled past it (tokens.go), so all instances together
//     admit at most what the shared bucket allows: B + r*Δt in every
//     window Δt, counting each decision at the instant it was made (the
//     store's for a round trip). Returned tokens are the one exception:
//     a window may admit as many more as leases returned in the B/r
//     before it (none when --lease-ttl >= B/r: the tokens are spent or
//     gone by then).
//   - Under-admission is bounded: tokens leased but not yet spent are
//     stranded (other instances cannot use them) — at most one lease per
//     key per instance, each at most MaxFraction of the bucket's capacity
//     and sized to about Target of the key's observed local rate, and only
//     until the lease TTL, and each only until the shared bucket could
//     have refilled past it (then it is forfeit: the shared bucket counts
//     it spent); at the TTL (or on Close) the unspent tokens still
//     spendable are returned to the shared bucket exactly.
//   - A cold key (observed rate * Target < 1 token) takes no batch: each
//     request is one round trip, exactly as without leasing.
//
// Only token-bucket items are leased. A request that also needs a window
// or an in-flight limit goes to the shared store as a whole; so do peeks.
// Remaining in a leased decision is the local lease plus the shared
// bucket's remaining at the last round trip. Adjust (settle) and Release go
// to the shared store.
package lease

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Option configures New.
type Option func(*Store)

// WithClock makes the wrapper read local time (lease expiry, rates) from c.
func WithClock(c sluice.Clock) Option { return func(s *Store) { s.clock = c } }

// WithTTL sets how long leased tokens may be spent locally (default 1 s).
func WithTTL(d time.Duration) Option { return func(s *Store) { s.ttl = d } }

// WithTarget sizes leases to cover this much of a key's observed rate
// (default 100 ms).
func WithTarget(d time.Duration) Option { return func(s *Store) { s.target = d } }

// WithMaxFraction caps a lease at capacity/n tokens (default n = 4).
func WithMaxFraction(n int64) Option { return func(s *Store) { s.maxFrac = n } }

// Stats counts decisions and round trips to the shared store.
type Stats struct {
	Decisions  uint64 // Take calls answered
	RoundTrips uint64 // Take and Adjust calls made to the shared store
	Leased     int64  // tokens held locally now (stranded if unspent)
}

// Store is the leasing wrapper. It is safe for concurrent use.
type Store struct {
	inner   store.Store
	clock   sluice.Clock
	ttl     time.Duration
	target  time.Duration
	maxFrac int64

	shards    [16]shard
	decisions atomic.Uint64
	trips     atomic.Uint64
	leased    atomic.Int64
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	pendMu    sync.Mutex
	pend      []ret // expired leases to return
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
}

// entry is one key's local lease.
type entry struct {
	spec   *store.Spec
	tokens int64 // leased, unspent (pruned to the spendable ones at each look)
	// The tokens' refill intervals (tokens.go): token k from the top is spendable
	// until end - k*tau (local ns); endStore is end on the shared store's
	// clock (for returns).
	end, endStore, tau int64
	expires            int64           // local ns: tokens usable until then
	refundBefore       int64           // the last fetch's RefundBefore (of the decisions spent from the lease)
	remote             sluice.Decision // the shared bucket at the last round trip
	known              bool            // remote is set
	blockedUntil       int64           // local ns: the shared bucket refused blockedCost until then
	blockedCost        int64
	flight             chan struct{} // a fetch for this key in progress (closed when done), or nil
	// observed local rate: tokens spent per second, updated per window
	rate     float64
	winStart int64
	spent    int64
	lastUse  int64
}

// New wraps inner. Call Close to return leased tokens.
func New(inner store.Store, opts ...Option) *Store {
	s := &Store{inner: inner, ttl: time.Second, target: 100 * time.Millisecond, maxFrac: 4,
		stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if s.clock == nil {
		s.clock = sluice.SystemClock{}
	}
	if s.ttl <= 0 {
		s.ttl = time.Second
	}
	if s.target <= 0 {
		s.target = 100 * time.Millisecond
	}
	if s.maxFrac < 1 {
		s.maxFrac = 4
	}
	for i := range s.shards {
		s.shards[i].m = map[string]*entry{}
	}
	go s.janitor()
	return s
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Decisions: s.decisions.Load(), RoundTrips: s.trips.Load(), Leased: s.leased.Load()}
}

func (s *Store) now() int64 { return s.clock.Now().UnixNano() }

func shardOf(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return int(h & 15)
}

// Take implements store.Store. It never holds a lock across a round trip
// to the shared store: a request that the local leases cannot serve marks
// the entries it fetches for (one fetch per entry at a time: others
// wanting the same keys wait for it, then spend locally), fetches without
// a lock, then decides locally again. A request whose keys are all cold
// (no batch to take) goes to the shared store as it would without
// leasing, without waiting on any other key.
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	if err := store.Validate(items); err != nil {
		return store.Result{}, err
	}
	s.decisions.Add(1)
	for _, it := range items {
		if !it.Spec.Leasable() || it.Cost == 0 || it.Reserve != 0 || it.Base != nil && !it.Base.SameState(it.Spec) {
			// (an item under another spec than its key's usual one goes
			// to the shared store, which converts the key's state; so
			// does a priority class's, whose reserve the shared store
			// applies to the key's whole state)
			s.trips.Add(1)
			return s.inner.Take(ctx, items)
		}
	}
	var buf [8]int
	sh := buf[:0]
	for _, it := range items {
		sh = append(sh, shardOf(it.Key))
	}
	locked := append([]int(nil), sh...)
	slices.Sort(locked)
	locked = slices.Compact(locked) // each shard once, in order
	ents := make([]*entry, len(items))
	// got holds, per item, what fetches took for this request's own cost
	// (the bottom of their batches, decided by the shared store when it
	// took them); the leases hold only the rest. A request that ends up
	// decided otherwise (directly on the shared store, or refused by
	// another item) forfeits it: at most its cost.
	var got []int64
	for attempt := 0; ; attempt++ {
		s.lock(locked)
		now := s.now()
		for i, it := range items {
			ents[i] = s.entryLocked(sh[i], it, now)
		}
		if items[0].MaxWait > 0 {
			// A booking: the local leases serve it only when they hold
			// every cost now; else it is booked on the shared store, whose
			// line is the one every instance waits in.
			covered := true
			for i, it := range items {
				covered = covered && it.Cost <= ents[i].tokens
			}
			if !covered {
				s.unlock(locked)
				return s.direct(ctx, items, ents)
			}
			for i := range items {
				items[i].Wait = 0
			}
		}
		pl := s.plan(items, ents, got, now)
		if pl.refuse >= 0 {
			// The shared bucket said it cannot have this much before
			// then: refuse without a round trip (never over-admits).
			s.refuseLocally(items, ents, pl.refuse, now)
			s.unlock(locked)
			return store.Result{}, nil
		}
		wait, need, needAt, deficits, cold := pl.wait, pl.need, pl.needAt, pl.deficits, pl.cold
		switch {
		case wait != nil:
			s.unlock(locked)
			select {
			case <-wait:
			case <-ctx.Done():
				return store.Result{}, ctx.Err()
			}
			continue
		case len(need) == 0:
			s.spendLocked(items, ents, got, now)
			s.unlock(locked)
			return store.Result{Allowed: true}, nil
		case cold && len(need) == len(items) || attempt >= 2:
			// Nothing to batch (or the leases keep running out under
			// us): decide on the shared store, as without leasing.
			s.unlock(locked)
			return s.direct(ctx, items, ents)
		}
		f := make(chan struct{})
		for _, i := range needAt {
			ents[i].flight = f
		}
		s.unlock(locked)
		if got == nil {
			got = make([]int64, len(items))
		}
		ok, err := s.fetch(ctx, need, needAt, deficits, items, ents, got, locked, now, f)
		if err != nil || !ok {
			return store.Result{}, err
		}
	}
}

// plan is what a request needs beyond its local leases: a fetch in
// flight to wait for, or the items to fetch (each its deficit and a batch
// to lease, needAt their places in the request), cold when none has a
// batch to lease; refuse is the index of an item the shared bucket cannot
// serve yet (else -1).
type plan struct {
	wait     chan struct{}
	need     []store.Item
	needAt   []int
	deficits []int64
	cold     bool
	refuse   int
}

// plan makes the request's plan at now (its shards locked), got being
// what fetches took for it already (nil: nothing).
func (s *Store) plan(items []store.Item, ents []*entry, got []int64, now int64) plan {
	pl := plan{cold: true, refuse: -1}
	for i, it := range items {
		e := ents[i]
		deficit := it.Cost - e.tokens
		if got != nil {
			deficit -= got[i]
		}
		if deficit <= 0 {
			continue
		}
		if e.flight != nil {
			pl.wait = e.flight // someone is fetching for this key: wait, then spend
			return pl
		}
		if now < e.blockedUntil && deficit >= e.blockedCost {
			pl.refuse = i
			return pl
		}
		extra := s.batch(e, now)
		if e.known && e.remote.Remaining < deficit+extra {
			// The shared bucket is low: lease at most half of what it
			// had left beyond this request, leaving the rest to others.
			extra = max(min(extra, (e.remote.Remaining-deficit)/2), 0)
		}
		if extra > 0 {
			pl.cold = false
		}
		pl.need = append(pl.need, store.Item{Key: it.Key, Spec: it.Spec, Cost: deficit + extra})
		pl.needAt, pl.deficits = append(pl.needAt, i), append(pl.deficits, deficit)
	}
	return pl
}

func (s *Store) lock(locked []int) {
	for _, x := range locked {
		s.shards[x].mu.Lock()
	}
}

func (s *Store) unlock(locked []int) {
	for _, x := range locked {
		s.shards[x].mu.Unlock()
	}
}

// entryLocked is item it's entry in shard x (made when missing, or when
// its limit changed: the old lease is returned).
func (s *Store) entryLocked(x int, it store.Item, now int64) *entry {
	m := s.shards[x].m
	e := m[it.Key]
	if e == nil || e.spec != it.Spec {
		if e != nil {
			s.expireLocked(it.Key, e) // the limit changed: its lease is for the old one
		}
		e = &entry{spec: it.Spec, winStart: now, tau: tokenNanos(it.Spec)}
		m[it.Key] = e
	}
	if e.expires <= now && e.tokens > 0 {
		s.expireLocked(it.Key, e)
	}
	s.pruneLocked(e, now)
	return e
}

// spendLocked takes every item's cost from what fetches took for it (got,
// nil: nothing) and its lease (each has enough).
func (s *Store) spendLocked(items []store.Item, ents []*entry, got []int64, now int64) {
	for i := range items {
		e, cost := ents[i], items[i].Cost
		local := cost
		if got != nil {
			local -= got[i]
		}
		e.tokens -= local
		s.leased.Add(-local)
		s.observe(e, cost, now)
		items[i].Decision = sluice.Decision{Allowed: true, Remaining: e.tokens + e.remote.Remaining, ResetAfter: e.remote.ResetAfter}
		items[i].RefundBefore = e.refundBefore
	}
}

// observe counts cost spent on e's key at now, for its observed rate.
func (s *Store) observe(e *entry, cost, now int64) {
	e.spent += cost
	e.lastUse = now
	if d := now - e.winStart; d >= int64(s.target) {
		r := float64(e.spent) / (float64(d) / 1e9)
		e.rate = (e.rate + r) / 2
		e.winStart, e.spent = now, 0
	}
}

// direct decides items on the shared store with their own costs, leaving
// the leases as they are, and remembers what the shared bucket said.
// A booking's items keep their Wait (the shared store's).
func (s *Store) direct(ctx context.Context, items []store.Item, ents []*entry) (store.Result, error) {
	s.trips.Add(1)
	r, err := s.inner.Take(ctx, items)
	if err != nil {
		return r, err
	}
	now := s.now()
	for i := range items {
		sh := &s.shards[shardOf(items[i].Key)]
		sh.mu.Lock()
		e := ents[i]
		e.remote, e.known, e.lastUse = items[i].Decision, true, now
		if !items[i].Decision.Allowed {
			e.blockedUntil, e.blockedCost = now+int64(items[i].Decision.RetryAfter), items[i].Cost
		} else if r.Allowed {
			s.observe(e, items[i].Cost, now) // so that a key that turns hot takes batches
		}
		items[i].Decision.Remaining += e.tokens
		sh.mu.Unlock()
	}
	return r, nil
}

// refuseLocally answers a request refused by key i's remembered refusal.
func (s *Store) refuseLocally(items []store.Item, ents []*entry, i int, now int64) {
	for j := range items {
		items[j].Decision = sluice.Decision{Allowed: true, Remaining: ents[j].tokens + ents[j].remote.Remaining}
	}
	e := ents[i]
	items[i].Decision = sluice.Decision{Remaining: e.tokens, RetryAfter: time.Duration(e.blockedUntil - now), ResetAfter: e.remote.ResetAfter}
}

// batch is the extra tokens to lease for e: about Target of its observed
// rate, at most capacity/MaxFraction.
func (s *Store) batch(e *entry, now int64) int64 {
	rate := e.rate
	if d := now - e.winStart; d > 0 && e.spent > 0 {
		rate = max(rate, float64(e.spent)/(float64(d)/1e9))
	}
	b := int64(rate * s.target.Seconds())
	return max(min(b, e.spec.Capacity()/s.maxFrac), 0)
}

// fetch takes what the leases lack from the shared store, holding no
// lock: with the batch first, and if that is refused, only the deficit (so
// that leasing never refuses what the shared bucket alone would admit).
// It then records the result under the locks, ends the flight f, and
// reports whether the request may go on (false: refused, the items hold
// the refusal).
func (s *Store) fetch(ctx context.Context, need []store.Item, needAt []int, deficits []int64, items []store.Item, ents []*entry,
	got []int64, locked []int, now int64, f chan struct{}) (bool, error) {
	s.trips.Add(1)
	r, err := s.inner.Take(ctx, need)
	if err == nil && !r.Allowed {
		batched := false
		for j, it := range need {
			if it.Cost > deficits[j] {
				need[j].Cost = deficits[j]
				batched = true
			}
		}
		if batched {
			s.trips.Add(1)
			r, err = s.inner.Take(ctx, need)
		}
	}
	s.lock(locked)
	defer s.unlock(locked)
	for _, i := range needAt {
		if ents[i].flight == f {
			ents[i].flight = nil
		}
	}
	close(f)
	if err != nil {
		return false, err
	}
	if !r.Allowed {
		for i := range items {
			items[i].Decision = sluice.Decision{Allowed: true, Remaining: ents[i].tokens + ents[i].remote.Remaining, ResetAfter: ents[i].remote.ResetAfter}
		}
		for j, i := range needAt {
			d := need[j].Decision
			e := ents[i]
			e.remote, e.known = d, true
			if !d.Allowed {
				e.blockedUntil, e.blockedCost = now+int64(d.RetryAfter), need[j].Cost
			}
			d.Remaining += e.tokens
			items[i].Decision = d
		}
		return false, nil
	}
	at := s.now()
	for j, i := range needAt {
		e := ents[i]
		// The deficit is this request's (decided by the shared store);
		// the lease takes the batch's top, spendable until the intervals
		// end: now (before the round trip) plus the time until the
		// shared bucket is full again (tokens.go).
		got[i] += deficits[j]
		extra := need[j].Cost - deficits[j]
		s.pruneLocked(e, at)
		end := addSat(now, int64(need[j].Decision.ResetAfter)) - 1
		e.addBatch(extra, end, max(need[j].RefundBefore, 1)-1)
		s.leased.Add(extra)
		e.remote, e.known = need[j].Decision, true
		e.blockedUntil = 0
		e.refundBefore = need[j].RefundBefore
		e.expires = now + int64(s.ttl)
		if key := items[i].Key; s.shards[shardOf(key)].m[key] != e {
			s.expireLocked(key, e) // replaced meanwhile (its limit changed): return the tokens
		}
	}
	return true, nil
}

// Adjust implements store.Store (on the shared store).
//
// A pause (Adjustment.Pause) or a ceiling (Adjustment.Lower) also drops
// the tokens leased locally for its key (they were taken from the shared
// bucket, whose pause or ceiling counts them as spent), so that the next
// request asks the shared store, which refuses it until the pause ends. (Other instances drop theirs when their leases
// expire, within the lease TTL; a fetch under way when the pause arrives
// may still bring tokens taken before it.)
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	s.dropPausedLeases(adj)
	s.trips.Add(1)
	return s.inner.Adjust(ctx, adj)
}

// AdjustRelease implements store.AdjustReleaser on the shared store:
// Adjust's adjustments (dropping the leases of a paused or lowered key as
// Adjust does) and the release of slots, in one call when the shared
// store is an AdjustReleaser (store.AdjustRelease).
func (s *Store) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	s.dropPausedLeases(adj)
	s.trips.Add(1)
	return store.AdjustRelease(ctx, s.inner, adj, slots)
}

// dropPausedLeases drops the tokens leased locally for the keys that adj
// pauses or lowers.
func (s *Store) dropPausedLeases(adj []store.Adjustment) {
	for _, a := range adj {
		if op := a.Op(); op != 'p' && op != 'l' {
			continue
		}
		sh := &s.shards[shardOf(a.Key)]
		sh.mu.Lock()
		if e := sh.m[a.Key]; e != nil {
			s.leased.Add(-e.tokens)
			e.tokens = 0
		}
		sh.mu.Unlock()
	}
}

// Release implements store.Store (on the shared store).
func (s *Store) Release(ctx context.Context, slots store.Slots) error {
	return s.inner.Release(ctx, slots)
}

// ConvertsSpecs implements store.SpecConverter: the shared store's
// answer (items under another spec than their key's usual one are decided
// there, not from leases).
func (s *Store) ConvertsSpecs() bool {
	c, ok := s.inner.(store.SpecConverter)
	return ok && c.ConvertsSpecs()
}

// CanRenew reports whether the shared store can renew slots.
func (s *Store) CanRenew() bool { return store.CanRenew(s.inner) }

// Renew implements store.Renewer on the shared store (where the slots
// are); a shared store that cannot renew makes it an error.
func (s *Store) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	return store.Renew(ctx, s.inner, slots, ttl)
}

// Close returns every leased token to the shared store, then closes it.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.sweep(true)
	})
	return s.inner.Close()
}

// Ping checks the shared store when it can be pinged.
func (s *Store) Ping(ctx context.Context) error {
	if p, ok := s.inner.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	return nil
}
