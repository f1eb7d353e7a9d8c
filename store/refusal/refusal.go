// Package refusal is a cache of a shared store's refusals, a wrapper of a
// store.Store: a request the shared store refused is answered refused again,
// without a call, until its RetryAfter, as long as nothing this instance
// knows of has returned budget to the key. A client hammering a key it has
// exhausted then costs the shared store (Redis) nothing.
//
// What it answers, and the guarantees (docs/behaviour.md section 5.4):
//
//   - It only ever refuses. Every admission is the wrapped store's, so it
//     never admits more than the store would.
//   - It answers a request from the cache only when the request is one item
//     (a multi-item request goes to the store: the store's answer reports
//     every item's state, which a cache cannot tell for the items it did not
//     refuse) of a kind whose refusals hold (store.Kind.RefusalsHold: token
//     buckets, fixed windows, quotas; not sliding windows or in-flight
//     caps), of a cost at least the refused one's (a peek, cost 0, or a
//     smaller cost goes to the store), under the same spec and base (an
//     override changed since misses), and, for a booking (Item.MaxWait > 0)
//     on a kind that books, when the refused cost is still more than
//     MaxWait away (so that waiting cannot admit it either), and of no
//     priority class's reserve (Item.Reserve 0: a class's refusal is of
//     its share, not of the key's whole budget), nor of a fair-share spec
//     (Spec.FairShare nil: a tenant's share's refusal is that tenant's).
//   - Its answer is the one the store would give if nothing else happened
//     to the key (store.Spec.RefusedAfter): refused, RetryAfter and
//     ResetAfter counted down from the store's, Remaining what has been
//     refilled since, Wait and RefundBefore 0, no slots; under a rate whose
//     token is not a whole number of nanoseconds its RetryAfter may be a
//     nanosecond short of the store's (never longer). When a figure hangs
//     on the store's rounding it asks the store.
//   - It keeps the store's single-item refusals, and the refusal a
//     single-item admission implies for the next request of its cost (it
//     left less than that: store.Spec.RefusedNext), so that a flood costs
//     the store about one call per refill of the cost, the admission's.
//     When a refusal ends, the requests for its key wait for the first
//     one's store call, whose answer most often refuses them too, rather
//     than each calling.
//   - A return of budget through this wrapper (an Adjust returning tokens,
//     a settle below the estimate, a cancelled booking, a lease's unspent
//     tokens) drops the key's refusal first, and a refusal the store gave
//     while a return to its key was under way is not kept; so is a request
//     on the key under another spec. The one case where it refuses what the
//     store would admit: budget returned to the key by another instance (or
//     a faster refill there under an override this instance has not seen)
//     before the cached RetryAfter — for at most that RetryAfter, itself at
//     most the time the key takes to refill the refused cost (or a penalty
//     box, or a pause, that the store itself enforces).
//   - It holds at most N refusals (New): at N a new one evicts expired ones
//     first, then the oldest, in O(1).
//   - It answers only while the store is known to answer (WithLiveness): a
//     store/failover above it sees an outage within DefaultLiveness even
//     when every request is one the cache refuses. A call the store fails
//     drops every refusal held (a store that comes back may have lost its
//     state: a Redis restarted empty).
//
// Peeks, Adjust, AdjustRelease, Release, Renew and Ping go to the wrapped
// store.
package refusal

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// DefaultEntries is sluice serve's --refusal-cache default for Redis.
const DefaultEntries = 100_000

// Option configures New.
type Option func(*Store)

// WithClock makes the cache read time (its refusals' deadlines) from c.
// With a shared store on another host the cache counts a refusal's
// RetryAfter from the moment it sent the request, so that it never
// refuses after the store's own deadline.
func WithClock(c sluice.Clock) Option { return func(s *Store) { s.clock = c } }

// WithLabel names the counter a hit on key counts in (HitsByLabel): the
// limit's name, for example. It is called once per refusal kept, and
// should return a bounded set of names. Without it every hit counts under
// "".
func WithLabel(f func(key string) string) Option { return func(s *Store) { s.label = f } }

// DefaultLiveness is WithLiveness's default: store/failover's probe
// interval.
const DefaultLiveness = 250 * time.Millisecond

// WithLiveness makes the cache answer only while the wrapped store is known
// to answer (when it can be pinged: a Ping method, as store/redisstore's):
// an answer from it (a call that did not fail) vouches for it for d; a
// request the cache would refuse after that pings it first, and on an
// error returns the error instead, so that a store/failover above sees the
// outage and decides by on_store_error (without the cache: it is not
// called while degraded). So an outage that no request reaching the store
// has shown yet (every request refused by the cache) is found within d
// and a Ping, at the cost of at most one Ping per d while the cache
// answers. 0: the cache answers whether or not the store does (its
// refusals are the store's). Default DefaultLiveness.
func WithLiveness(d time.Duration) Option { return func(s *Store) { s.live = int64(max(d, 0)) } }

// Stats counts the cache's work.
type Stats struct {
	Hits      uint64 // requests answered from the cache (no store call)
	Kept      uint64 // refusals kept
	Dropped   uint64 // refusals dropped by a return of budget or a changed spec
	Evictions uint64 // refusals evicted at the cap before they expired
	Entries   int64  // refusals held now (some may have expired)
}

// Store is the refusal cache. It is safe for concurrent use.
type Store struct {
	inner   store.Store
	clock   sluice.Clock
	base    time.Time
	label   func(string) string
	shards  []shard
	mask    uint32
	entries atomic.Int64
	hits    atomic.Uint64
	kept    atomic.Uint64
	dropped atomic.Uint64
	evicted atomic.Uint64
	byLabel sync.Map // string -> *atomic.Uint64
	// Liveness (WithLiveness): the wrapped store's Ping (nil: none), how
	// long an answer from it vouches for it, when it last answered (the
	// cache's ns), and whether a Ping is under way.
	ping    func(context.Context) error
	live    int64
	lastOK  atomic.Int64
	pinging atomic.Bool
	// gen moves when the wrapped store fails: the refusals held from
	// before are no longer trusted (a store that comes back may have lost
	// its state).
	gen atomic.Uint64
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	// flights are the keys whose refusal ended and whose store call is
	// under way: a request for one waits for its answer (which most often
	// refuses it too) rather than joining a herd of calls.
	flights map[string]chan struct{}
	head    *entry // oldest
	tail    *entry // newest
	cap     int
	epoch   uint64 // moved by every return of budget to one of its keys
	_       [32]byte
}

// entry is one key's refusal.
type entry struct {
	key        string
	spec, base *store.Spec
	cost       int64
	dec        sluice.Decision // the store's
	at         int64           // the cache's ns when the refused request was sent
	deadline   int64           // at + dec.RetryAfter
	gen        uint64          // Store.gen when it was kept
	hits       *atomic.Uint64
	prev, next *entry
}

// New wraps inner with a cache of at most n refusals. With n < 1 it
// returns inner's calls unchanged (a cache of nothing).
func New(inner store.Store, n int, opts ...Option) *Store {
	s := &Store{inner: inner, live: int64(DefaultLiveness)}
	if p, ok := inner.(interface{ Ping(context.Context) error }); ok {
		s.ping = p.Ping
	}
	for _, o := range opts {
		o(s)
	}
	if s.clock == nil {
		s.clock = sluice.SystemClock{}
	}
	if s.label == nil {
		s.label = func(string) string { return "" }
	}
	s.base = s.clock.Now()
	nsh := 1
	for nsh < 64 && n/(nsh*2) >= 256 { // shards of at least 256 entries
		nsh *= 2
	}
	s.shards, s.mask = make([]shard, nsh), uint32(nsh-1)
	for i := range s.shards {
		s.shards[i].m = map[string]*entry{}
		s.shards[i].cap = n / nsh
	}
	return s
}

// Inner returns the wrapped store.
func (s *Store) Inner() store.Store { return s.inner }

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Hits: s.hits.Load(), Kept: s.kept.Load(), Dropped: s.dropped.Load(), Evictions: s.evicted.Load(), Entries: s.entries.Load()}
}

// Len is the number of refusals held (some may have expired).
func (s *Store) Len() int64 { return s.entries.Load() }

// HitsByLabel returns the hits so far by label (WithLabel); labels are
// listed from their first kept refusal on.
func (s *Store) HitsByLabel() map[string]uint64 {
	out := map[string]uint64{}
	s.byLabel.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

func (s *Store) now() int64 { return int64(s.clock.Now().Sub(s.base)) }

func (s *Store) shardOf(key string) *shard {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &s.shards[h&s.mask]
}

// cacheable reports whether a request of these items may be answered
// from, or kept in, the cache.
func (s *Store) cacheable(items []store.Item) bool {
	if len(items) != 1 || s.shards[0].cap < 1 {
		return false
	}
	it := &items[0]
	// (a priority class's item, Reserve > 0, goes to the store: its
	// refusal is of the class's share, which a request of another class
	// on the key does not share, and its RetryAfter is the class's; a
	// fair-share item too: its refusal may be its tenant's share's, which
	// another tenant of the key does not share)
	return it.Cost > 0 && it.Reserve == 0 && it.Spec != nil && it.Spec.FairShare == nil && it.Key != "" && it.Spec.Kind.RefusalsHold()
}

func sameSpec(a, b *store.Spec) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// Take implements store.Store: a single-item request refused by a refusal
// held is answered from it; any other goes to the wrapped store, and a
// single-item refusal it answers is kept.
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	if !s.cacheable(items) {
		at := s.now()
		r, err := s.inner.Take(ctx, items)
		s.answered(err, at)
		if s.entries.Load() > 0 {
			s.touched(items, err == nil && r.Allowed)
		}
		return r, err
	}
	if err := store.Validate(items); err != nil {
		return store.Result{}, err
	}
	it := &items[0]
	sh := s.shardOf(it.Key)
	for waited := false; ; waited = true {
		now := s.now()
		sh.mu.Lock()
		expired := false
		if e := sh.m[it.Key]; e != nil {
			switch {
			case !sameSpec(e.spec, it.Spec) || !sameSpec(e.base, it.Base):
				s.dropLocked(sh, e) // decided under another spec from now on
				s.dropped.Add(1)
			case e.gen != s.gen.Load():
				s.dropLocked(sh, e) // kept before the store failed
			case now >= e.deadline:
				s.dropLocked(sh, e)
				expired = true
			case it.Cost >= e.cost && e.deadline-now > s.maxWait(it):
				if dec, ok := e.spec.RefusedAfter(e.dec, e.cost, it.Cost, time.Duration(now-e.at)); ok {
					sh.mu.Unlock()
					if err := s.alive(ctx, now); err != nil {
						return store.Result{}, err
					}
					e.hits.Add(1)
					s.hits.Add(1)
					it.Decision, it.RefundBefore, it.Wait = dec, 0, 0
					return store.Result{}, nil
				}
			}
		}
		if f := sh.flights[it.Key]; f != nil && !waited {
			// A refusal of this key has just ended and the store is being
			// asked: its answer tells this request too, most often.
			sh.mu.Unlock()
			select {
			case <-f:
			case <-ctx.Done():
				return store.Result{}, ctx.Err()
			}
			continue
		}
		var f chan struct{}
		if expired && sh.flights[it.Key] == nil {
			f = make(chan struct{})
			if sh.flights == nil {
				sh.flights = map[string]chan struct{}{}
			}
			sh.flights[it.Key] = f
		}
		epoch := sh.epoch
		sh.mu.Unlock()
		r, err := s.take(ctx, items, sh, epoch, now)
		if f != nil {
			sh.mu.Lock()
			delete(sh.flights, it.Key)
			sh.mu.Unlock()
			close(f)
		}
		return r, err
	}
}

// take decides a single-item request on the wrapped store, sent at now
// (epoch read before), and keeps the refusal its answer tells.
func (s *Store) take(ctx context.Context, items []store.Item, sh *shard, epoch uint64, now int64) (store.Result, error) {
	it := &items[0]
	gen := s.gen.Load()
	r, err := s.inner.Take(ctx, items)
	s.answered(err, now)
	switch {
	case err != nil:
	case r.Allowed:
		// An admission that leaves less than its cost: the next request of
		// that cost is refused, and the store's refusal can be told now.
		if dec, ok := it.Spec.RefusedNext(it.Decision, it.Cost); ok {
			s.keep(sh, epoch, gen, it, dec, now)
		} else {
			s.touched(items, true)
		}
	case !it.Decision.Allowed && it.Decision.RetryAfter > 0:
		s.keep(sh, epoch, gen, it, it.Decision, now)
	}
	return r, err
}

// touched drops the refusals of the keys a request decided under another
// spec than the refusal's (the store converts the key's state, and a
// faster refill under the other spec gives back budget: a refusal
// answered meanwhile is not kept either) and, when it was admitted, of
// the keys it took from (the refusal still holds, taking only pushes it
// later, but the figures it would report are no longer the store's).
func (s *Store) touched(items []store.Item, admitted bool) {
	for i := range items {
		it := &items[i]
		if !it.Spec.Kind.RefusalsHold() {
			continue
		}
		sh := s.shardOf(it.Key)
		sh.mu.Lock()
		if e := sh.m[it.Key]; e != nil {
			if other := !sameSpec(e.spec, it.Spec) || !sameSpec(e.base, it.Base); other || admitted && it.Cost > 0 {
				if other {
					sh.epoch++
					s.dropped.Add(1)
				}
				s.dropLocked(sh, e)
			}
		}
		sh.mu.Unlock()
	}
}

// maxWait is how far off a refused cost may be for a request to be
// answered refused: its MaxWait when its kind books (it would wait that
// long), else 0.
func (s *Store) maxWait(it *store.Item) int64 {
	if it.MaxWait > 0 && it.Spec.Kind.Books() {
		return int64(it.MaxWait)
	}
	return 0
}

// keep records dec, the store's refusal of it's request (or the refusal
// its admission implies for the next such request), the request sent at
// at, in place of the key's refusal held; unless a return of budget to the
// shard's keys began since epoch was read, or the store failed since gen
// was (then it drops the key's).
func (s *Store) keep(sh *shard, epoch, gen uint64, it *store.Item, dec sluice.Decision, at int64) {
	e := &entry{key: it.Key, spec: it.Spec, base: it.Base, cost: it.Cost, dec: dec, at: at,
		deadline: at + int64(dec.RetryAfter), gen: gen}
	_, ok := it.Spec.RefusedAfter(dec, it.Cost, it.Cost, 0)
	if ok && e.deadline > at { // (not an overflow: a refusal for longer than the cache's clock counts)
		e.hits = s.counter(s.label(it.Key))
	} else {
		e = nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := sh.m[it.Key]; old != nil {
		s.dropLocked(sh, old)
	}
	if e == nil || sh.epoch != epoch || s.gen.Load() != gen {
		return
	}
	now := s.now()
	for n := 0; sh.head != nil && n < 2 && sh.head.deadline <= now; n++ {
		s.dropLocked(sh, sh.head) // expired ones first
	}
	if len(sh.m) >= sh.cap {
		if sh.head.deadline > now {
			s.evicted.Add(1)
		}
		s.dropLocked(sh, sh.head)
	}
	sh.m[e.key] = e
	e.prev = sh.tail
	if sh.tail != nil {
		sh.tail.next = e
	} else {
		sh.head = e
	}
	sh.tail = e
	s.entries.Add(1)
	s.kept.Add(1)
}

// counter is label's hit counter.
func (s *Store) counter(label string) *atomic.Uint64 {
	if v, ok := s.byLabel.Load(label); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := s.byLabel.LoadOrStore(label, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// dropLocked removes e from its shard.
func (s *Store) dropLocked(sh *shard, e *entry) {
	delete(sh.m, e.key)
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sh.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = nil, nil
	s.entries.Add(-1)
}

// forget drops the refusals of the keys adj changes, and for a return of
// budget (or a correction under another spec than the refusal's) moves
// their shards' epochs so that a refusal answered meanwhile is not kept.
func (s *Store) forget(adj []store.Adjustment) {
	for i := range adj {
		a := &adj[i]
		op := a.Op()
		if op == 0 {
			continue
		}
		sh := s.shardOf(a.Key)
		sh.mu.Lock()
		e := sh.m[a.Key]
		if op == '-' || e != nil && (!sameSpec(e.spec, a.Spec) || !sameSpec(e.base, a.Base)) {
			sh.epoch++
		}
		if e != nil {
			// (a charge, a pause or a ceiling keeps the refusal true, but
			// not the figures it would report)
			s.dropLocked(sh, e)
			s.dropped.Add(1)
		}
		sh.mu.Unlock()
	}
}

// Adjust implements store.Store: on the wrapped store; a return of
// budget drops its key's refusal before and after the call (so that a
// request meanwhile asks the store, and a refusal the store gave before
// the return landed is not kept).
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	if s.shards[0].cap < 1 {
		return s.inner.Adjust(ctx, adj)
	}
	s.forget(adj)
	at := s.now()
	err := s.inner.Adjust(ctx, adj)
	s.answered(err, at)
	s.forget(adj)
	return err
}

// AdjustRelease implements store.AdjustReleaser: Adjust's adjustments,
// with their keys' refusals dropped as Adjust drops them, and the release
// of slots, in one call when the wrapped store is an AdjustReleaser
// (store.AdjustRelease).
func (s *Store) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	if s.shards[0].cap < 1 {
		return store.AdjustRelease(ctx, s.inner, adj, slots)
	}
	s.forget(adj)
	at := s.now()
	err := store.AdjustRelease(ctx, s.inner, adj, slots)
	s.answered(err, at)
	s.forget(adj)
	return err
}

// Release implements store.Store (on the wrapped store; in-flight caps are
// never cached).
func (s *Store) Release(ctx context.Context, slots store.Slots) error {
	return s.inner.Release(ctx, slots)
}

// Close closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }

// ConvertsSpecs implements store.SpecConverter: the wrapped store's
// answer.
func (s *Store) ConvertsSpecs() bool {
	c, ok := s.inner.(store.SpecConverter)
	return ok && c.ConvertsSpecs()
}

// CanRenew reports whether the wrapped store can renew slots.
func (s *Store) CanRenew() bool { return store.CanRenew(s.inner) }

// Renew implements store.Renewer on the wrapped store.
func (s *Store) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	return store.Renew(ctx, s.inner, slots, ttl)
}

// Ping checks the wrapped store when it can be pinged (store/failover
// probes through it).
func (s *Store) Ping(ctx context.Context) error {
	if s.ping == nil {
		return nil
	}
	start := s.now()
	err := s.ping(ctx)
	s.answered(err, start)
	return err
}

// answered notes a call to the wrapped store sent at at: one that did not
// fail vouches for it (WithLiveness); one that failed (but for an invalid
// request, a full store or a caller giving up) drops every refusal held,
// as the store may have lost its state by the time it answers again.
func (s *Store) answered(err error, at int64) {
	if err != nil && !errors.Is(err, store.ErrInvalidItem) && !errors.Is(err, store.ErrFull) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, store.ErrCannotRenew) {
		// The store failed (or did not answer in time): whatever it held
		// may be gone when it answers again.
		s.gen.Add(1)
		return
	}
	if err == nil && s.live > 0 {
		for {
			old := s.lastOK.Load()
			if old >= at || s.lastOK.CompareAndSwap(old, at) {
				return
			}
		}
	}
}

// alive is nil when the wrapped store is known to answer at now (or
// cannot be pinged, or WithLiveness is 0); else it pings it, one caller at
// a time (the others answer meanwhile), and returns the Ping's error.
func (s *Store) alive(ctx context.Context, now int64) error {
	if s.ping == nil || s.live == 0 || now-s.lastOK.Load() < s.live || !s.pinging.CompareAndSwap(false, true) {
		return nil
	}
	defer s.pinging.Store(false)
	return s.Ping(ctx)
}
