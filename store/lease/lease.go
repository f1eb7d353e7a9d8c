// Package lease is token leasing over a shared store: an instance takes a
// batch of tokens for a hot key from the shared store (Redis) in one round
// trip and spends them locally, so most decisions on hot keys cost no round
// trip.
//
// Bounds (docs/behaviour.md section 5.3):
//
//   - Never over-admits: every token spent locally was first taken from
//     the shared bucket, so all instances together admit at most what the
//     shared bucket allows (B + r*t).
//   - Under-admission is bounded: tokens leased but not yet spent are
//     stranded (other instances cannot use them) — at most one lease per
//     key per instance, each at most MaxFraction of the bucket's capacity
//     and sized to about Target of the key's observed local rate, and only
//     until the lease TTL: then (or when the key goes idle, or on Close)
//     the unspent tokens are returned to the shared bucket exactly (if it
//     has not refilled meanwhile, when returning them would change
//     nothing).
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
	pend      []store.Adjustment // expired leases to return
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
}

// entry is one key's local lease.
type entry struct {
	spec         *store.Spec
	tokens       int64           // leased, unspent
	expires      int64           // local ns: tokens usable until then
	refundBefore int64           // shared store's horizon for returning them
	remote       sluice.Decision // the shared bucket at the last round trip
	known        bool            // remote is set
	blockedUntil int64           // local ns: the shared bucket refused blockedCost until then
	blockedCost  int64
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

// Take implements store.Store.
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	if err := store.Validate(items); err != nil {
		return store.Result{}, err
	}
	s.decisions.Add(1)
	for _, it := range items {
		if it.Spec.Kind != store.TokenBucket || it.Cost == 0 {
			s.trips.Add(1)
			return s.inner.Take(ctx, items)
		}
	}
	// Lock the items' shards in order.
	var buf [8]int
	sh := buf[:0]
	for _, it := range items {
		sh = append(sh, shardOf(it.Key))
	}
	locked := append([]int(nil), sh...)
	slices.Sort(locked)
	locked = slices.Compact(locked) // each shard once, in order
	for _, x := range locked {
		s.shards[x].mu.Lock()
	}
	defer func() {
		for _, x := range locked {
			s.shards[x].mu.Unlock()
		}
	}()
	now := s.now()
	ents := make([]*entry, len(items))
	var need []store.Item // what the local leases lack, plus a batch
	var needAt []int
	for i, it := range items {
		m := s.shards[sh[i]].m
		e := m[it.Key]
		if e == nil || e.spec != it.Spec {
			if e != nil {
				s.expireLocked(it.Key, e) // the limit changed: its lease is for the old one
			}
			e = &entry{spec: it.Spec, winStart: now}
			m[it.Key] = e
		}
		if e.expires <= now && e.tokens > 0 {
			s.expireLocked(it.Key, e)
		}
		ents[i] = e
		if deficit := it.Cost - e.tokens; deficit > 0 {
			if now < e.blockedUntil && deficit >= e.blockedCost {
				// The shared bucket said it cannot have this much before
				// then: refuse without a round trip (never over-admits).
				s.refuseLocally(items, ents[:i+1], i, now)
				return store.Result{}, nil
			}
			extra := s.batch(e, now)
			if e.known && e.remote.Remaining < deficit+extra {
				// The shared bucket is low: lease at most half of what it
				// had left beyond this request, leaving the rest to others.
				extra = max(min(extra, (e.remote.Remaining-deficit)/2), 0)
			}
			need = append(need, store.Item{Key: it.Key, Spec: it.Spec, Cost: deficit + extra})
			needAt = append(needAt, i)
		}
	}
	if len(need) > 0 {
		ok, err := s.fetch(ctx, need, ents, needAt, items, now)
		if err != nil {
			return store.Result{}, err
		}
		if !ok {
			return store.Result{}, nil
		}
	}
	for i := range items {
		e, cost := ents[i], items[i].Cost
		e.tokens -= cost
		s.leased.Add(-cost)
		e.spent += cost
		e.lastUse = now
		if d := now - e.winStart; d >= int64(s.target) {
			r := float64(e.spent) / (float64(d) / 1e9)
			e.rate = (e.rate + r) / 2
			e.winStart, e.spent = now, 0
		}
		items[i].Decision = sluice.Decision{Allowed: true, Remaining: e.tokens + e.remote.Remaining, ResetAfter: e.remote.ResetAfter}
		items[i].RefundBefore = e.refundBefore
	}
	return store.Result{Allowed: true}, nil
}

// refuseLocally answers a request refused by key i's remembered refusal.
func (s *Store) refuseLocally(items []store.Item, ents []*entry, i int, now int64) {
	for j := range items {
		items[j].Decision = sluice.Decision{Allowed: true}
		if j < len(ents) {
			items[j].Decision.Remaining = ents[j].tokens + ents[j].remote.Remaining
		}
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

// fetch takes what the leases lack from the shared store: with the batch
// first, and if that is refused, only the deficit (so that leasing never
// refuses what the shared bucket alone would admit). It reports whether the
// request can be admitted; on false the items hold the refusal.
func (s *Store) fetch(ctx context.Context, need []store.Item, ents []*entry, needAt []int, items []store.Item, now int64) (bool, error) {
	s.trips.Add(1)
	r, err := s.inner.Take(ctx, need)
	if err != nil {
		return false, err
	}
	if !r.Allowed {
		batched := false
		for j, it := range need {
			if deficit := items[needAt[j]].Cost - ents[needAt[j]].tokens; it.Cost > deficit {
				need[j].Cost = deficit
				batched = true
			}
		}
		if batched {
			s.trips.Add(1)
			if r, err = s.inner.Take(ctx, need); err != nil {
				return false, err
			}
		}
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
	for j, i := range needAt {
		e := ents[i]
		e.tokens += need[j].Cost
		s.leased.Add(need[j].Cost)
		e.remote, e.known = need[j].Decision, true
		e.blockedUntil = 0
		e.refundBefore = need[j].RefundBefore
		e.expires = now + int64(s.ttl)
	}
	return true, nil
}

// expireLocked stops e's tokens from being spent and queues them for
// return (the janitor sends them; no round trip under a shard lock).
func (s *Store) expireLocked(key string, e *entry) {
	if e.tokens <= 0 {
		return
	}
	s.leased.Add(-e.tokens)
	s.pendMu.Lock()
	s.pend = append(s.pend, store.Adjustment{Key: key, Spec: e.spec, Delta: -e.tokens, RefundBefore: e.refundBefore})
	s.pendMu.Unlock()
	e.tokens = 0
}

// janitor returns the tokens of expired and idle leases.
func (s *Store) janitor() {
	defer close(s.done)
	t := time.NewTicker(max(s.ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep(false)
		}
	}
}

// sweep returns the tokens of leases past their TTL (all of them when
// all is set) and forgets keys idle for a TTL.
func (s *Store) sweep(all bool) {
	now := s.now()
	s.pendMu.Lock()
	adj := s.pend
	s.pend = nil
	s.pendMu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.tokens > 0 && (all || e.expires <= now) {
				adj = append(adj, store.Adjustment{Key: k, Spec: e.spec, Delta: -e.tokens, RefundBefore: e.refundBefore})
				s.leased.Add(-e.tokens)
				e.tokens = 0
			}
			if e.tokens == 0 && (all || now-e.lastUse > int64(s.ttl)) {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
	if len(adj) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.trips.Add(1)
		s.inner.Adjust(ctx, adj)
	}
}

// Adjust implements store.Store (on the shared store).
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	s.trips.Add(1)
	return s.inner.Adjust(ctx, adj)
}

// Release implements store.Store (on the shared store).
func (s *Store) Release(ctx context.Context, lease store.Lease) error {
	return s.inner.Release(ctx, lease)
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
