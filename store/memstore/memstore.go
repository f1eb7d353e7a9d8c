// Package memstore is the in-process store.Store: sharded maps, one mutex
// per shard (held only for the transitions, never across I/O), idle keys
// evicted, and a hard cap on keys.
//
// Eviction changes no decision: a key is evicted only once its state equals
// a new key's (a full token bucket, a sliding window whose counts have
// aged out, no live leases). The cap bounds memory against callers that
// invent keys: when a shard holds its share of the cap and nothing in it is
// idle, a request needing a new key there is refused with store.ErrFull
// (fail closed: nothing is taken), and existing keys keep working.
package memstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/window"
)

// DefaultMaxKeys is the key cap unless WithMaxKeys sets another.
const DefaultMaxKeys = 1_000_000

const shardCount = 64

// Option configures New.
type Option func(*Store)

// WithClock makes the store read time from c (fake clocks in tests and the
// simulator); the default is the system clock, monotonic for buckets and
// leases, wall time for window boundaries.
func WithClock(c sluice.Clock) Option { return func(s *Store) { s.clock = c } }

// WithMaxKeys caps the keys held (buckets, windows and lease sets); n < 1
// means DefaultMaxKeys.
func WithMaxKeys(n int) Option {
	return func(s *Store) {
		if n >= 1 {
			s.maxKeys = n
		}
	}
}

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	clock     sluice.Clock
	t0        time.Time
	maxKeys   int
	perShard  int
	seed      maphash.Seed
	leaseBase string
	leaseSeq  atomic.Uint64
	keys      atomic.Int64
	evictions atomic.Uint64
	closed    atomic.Bool
	noEvict   bool // tests: keep every key
	shards    [shardCount]shard
}

type shard struct {
	mu     sync.Mutex
	m      table
	leases map[string]*slots
	ops    uint32
	_      [40]byte
}

// entry is a key's state: for a token bucket (tat, origin, phase), for a
// sliding window (index, prev, curr); idle is the time (ns since t0) from
// which the state equals a new key's.
type entry struct {
	a, b, c int64
	idle    int64
}

type slots struct {
	ids []string
	exp []int64 // ns since t0
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{maxKeys: DefaultMaxKeys, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(s)
	}
	if s.clock != nil {
		s.t0 = s.clock.Now()
	} else {
		s.t0 = time.Now()
	}
	s.perShard = min(max(s.maxKeys/shardCount, 1), maxEntries) // a table indexes at most maxEntries
	var b [8]byte
	rand.Read(b[:])
	s.leaseBase = strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36) + "-"
	for i := range s.shards {
		s.shards[i].m.seed = s.seed
		s.shards[i].leases = map[string]*slots{}
	}
	return s
}

// Stats returns the keys held and evictions so far.
func (s *Store) Stats() store.Stats {
	return store.Stats{Keys: s.keys.Load(), Evictions: s.evictions.Load()}
}

// now returns ns since t0 (monotonic) and, with a Clock, the wall time in
// Unix ns (else 0: wall computes it when a window needs it).
func (s *Store) now() (int64, int64) {
	if s.clock != nil {
		t := s.clock.Now()
		return int64(t.Sub(s.t0)), t.UnixNano()
	}
	return int64(time.Since(s.t0)), 0
}

// wall returns the wall time of d: window boundaries follow the wall clock
// (t0's wall reading plus the monotonic time elapsed since).
func (s *Store) wall(w, d int64) int64 {
	if w != 0 || s.clock != nil {
		return w
	}
	return s.t0.UnixNano() + d
}

// hash is a key's hash: its low bits pick the shard, the others the slot.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

func shardOf(h uint64) int { return int(h & (shardCount - 1)) }

func (s *Store) shardOf(key string) int { return shardOf(s.hash(key)) }

// Take implements store.Store.
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	return s.take(items, false)
}

// TakeBorrowed implements store.KeyBorrower: items' keys may alias memory
// the caller reuses after the call. The store copies a key it keeps (a new
// key's, a lease's) and, on return, every Item.Key is a string the caller
// may keep: the store's own copy where it holds the key (no allocation for
// a decision on an existing key), else a fresh copy.
func (s *Store) TakeBorrowed(ctx context.Context, items []store.Item) (store.Result, error) {
	return s.take(items, true)
}

func (s *Store) take(items []store.Item, borrowed bool) (store.Result, error) {
	if s.closed.Load() {
		if borrowed {
			ownKeys(items)
		}
		return store.Result{}, store.ErrClosed
	}
	if err := store.Validate(items); err != nil {
		if borrowed {
			ownKeys(items)
		}
		return store.Result{}, err
	}
	d, wall := s.now()
	if len(items) == 1 { // one shard: no ordering, no scratch arrays
		h := s.hash(items[0].Key)
		shd := &s.shards[shardOf(h)]
		shd.mu.Lock()
		res, err := s.take1(shd, h, &items[0], d, wall, borrowed)
		if err == nil {
			s.sweep(shd, d)
		}
		shd.mu.Unlock()
		return res, err
	}
	// Each item's shard, and every shard involved locked in ascending order.
	var shBuf, lockBuf [8]int
	var entBuf [8]*tentry
	var nextBuf [8]entry
	var hashBuf [8]uint64
	itemShard, locked, ents, next, hashes := shBuf[:0], lockBuf[:0], entBuf[:0], nextBuf[:0], hashBuf[:0]
	for _, it := range items {
		h := s.hash(it.Key)
		hashes = append(hashes, h)
		itemShard = append(itemShard, shardOf(h))
		ents = append(ents, nil)
		next = append(next, entry{})
	}
	locked = append(locked, itemShard...)
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

	res := store.Result{Allowed: true}
	roomMade := false // makeRoom may have evicted an entry an earlier item holds
	for i := range items {
		it := &items[i]
		shd := &s.shards[itemShard[i]]
		switch it.Spec.Kind {
		case store.Concurrency:
			it.Decision = s.peekSlots(shd, *it, d)
		default:
			e := shd.m.get(hashes[i], it.Key)
			if e == nil && it.Cost > 0 && shd.m.n+len(shd.leases) >= s.perShard { // a peek creates nothing
				roomMade = true
				if !s.makeRoom(shd, d) {
					if borrowed {
						ownKeys(items)
					}
					return store.Result{}, s.fullError(it.Key)
				}
			}
			ents[i] = e
			var cur entry
			if e != nil {
				cur = e.entry
			}
			next[i], it.Decision = step(*it, cur, e != nil, d, s.wall(wall, d))
		}
		if !it.Decision.Allowed {
			res.Allowed = false
		}
	}
	if !res.Allowed {
		for i := range items {
			if it := &items[i]; it.Decision.Allowed && it.Cost > 0 {
				// Nothing was taken: report this item's state as it is.
				it.Decision = s.peek(&s.shards[itemShard[i]], *it, ents[i], d, wall)
			}
			if borrowed {
				ownKey(&items[i], ents[i]) // (nil for Concurrency items)
			}
		}
		return res, nil
	}
	for i := range items {
		it := &items[i]
		shd := &s.shards[itemShard[i]]
		if it.Spec.Kind == store.Concurrency {
			if borrowed {
				ownKey(it, nil)
			}
			s.takeSlot(shd, it, d, &res)
			continue
		}
		if it.Cost > 0 {
			it.RefundBefore = store.RefundBefore(it.Spec, s.wall(wall, d), it.Decision.ResetAfter)
		}
		e := ents[i]
		switch {
		case e != nil && !roomMade:
			e.entry = next[i] // in place: no second map operation
		case e != nil || it.Cost > 0: // a peek creates nothing
			if e = shd.m.get(hashes[i], it.Key); e != nil {
				e.entry = next[i]
			} else {
				e = s.insert(shd, hashes[i], it.Key, next[i], borrowed) // nil: not kept (the table is at its limit)
			}
		}
		if borrowed {
			ownKey(it, e)
		}
	}
	for _, x := range locked {
		s.sweep(&s.shards[x], d)
	}
	return res, nil
}

// take1 decides a single item in its locked shard.
func (s *Store) take1(shd *shard, h uint64, it *store.Item, d, wall int64, borrowed bool) (store.Result, error) {
	res := store.Result{Allowed: true}
	if it.Spec.Kind == store.Concurrency {
		it.Decision = s.peekSlots(shd, *it, d)
		if borrowed {
			ownKey(it, nil)
		}
		if res.Allowed = it.Decision.Allowed; res.Allowed && it.Cost > 0 {
			s.takeSlot(shd, it, d, &res)
		}
		return res, nil
	}
	e := shd.m.get(h, it.Key)
	var cur entry
	if e != nil {
		cur = e.entry
	} else if it.Cost > 0 && shd.m.n+len(shd.leases) >= s.perShard && !s.makeRoom(shd, d) {
		if borrowed {
			ownKey(it, nil)
		}
		return store.Result{}, s.fullError(it.Key)
	}
	next, dec := step(*it, cur, e != nil, d, s.wall(wall, d))
	it.Decision = dec
	res.Allowed = dec.Allowed
	if dec.Allowed && it.Cost > 0 {
		it.RefundBefore = store.RefundBefore(it.Spec, s.wall(wall, d), dec.ResetAfter)
		if e != nil {
			e.entry = next
		} else {
			e = s.insert(shd, h, it.Key, next, borrowed)
		}
	} else if e != nil && dec.Allowed {
		e.entry = next // a peek brings the state forward (as Take with several items does)
	}
	if borrowed {
		ownKey(it, e)
	}
	return res, nil
}

// insert adds a new key's entry (copying a borrowed key), counting it; nil
// when the shard's table is at its limit.
func (s *Store) insert(shd *shard, h uint64, key string, e entry, borrowed bool) *tentry {
	if borrowed {
		key = strings.Clone(key)
	}
	p := shd.m.insert(h, key, e)
	if p != nil {
		s.keys.Add(1)
	}
	return p
}

// peek is item it's decision at cost 0 (its state as it is), for a refused
// request whose other items refused: e is its entry (nil: none).
func (s *Store) peek(shd *shard, it store.Item, e *tentry, d, wall int64) sluice.Decision {
	it.Cost = 0
	if it.Spec.Kind == store.Concurrency {
		return s.peekSlots(shd, it, d)
	}
	if e != nil && e.key != it.Key {
		e = nil // evicted to make room (it was idle: the same as new)
	}
	var cur entry
	if e != nil {
		cur = e.entry
	}
	_, dec := step(it, cur, e != nil, d, s.wall(wall, d))
	return dec
}

// takeSlot takes an in-flight slot for a Concurrency item (whose key the
// store may keep).
func (s *Store) takeSlot(shd *shard, it *store.Item, d int64, res *store.Result) {
	if it.Cost == 0 {
		return
	}
	if res.Lease.ID == "" {
		res.Lease.ID = s.leaseBase + strconv.FormatUint(s.leaseSeq.Add(1), 36)
	}
	sl := shd.leases[it.Key]
	if sl == nil {
		sl = &slots{}
		shd.leases[it.Key] = sl
		s.keys.Add(1)
	}
	sl.ids = append(sl.ids, res.Lease.ID)
	sl.exp = append(sl.exp, d+int64(it.Spec.LeaseTTL))
	res.Lease.Keys = append(res.Lease.Keys, it.Key)
}

func (s *Store) fullError(key string) error {
	return fmt.Errorf("%w: %d keys held (cap %d); new key %q refused", store.ErrFull, s.keys.Load(), s.maxKeys, key)
}

// ownKey replaces a borrowed key by a string the caller may keep: the
// table's copy when entry e still holds this key (an entry evicted to make
// room holds none), else a fresh copy.
func ownKey(it *store.Item, e *tentry) {
	if e != nil && e.key == it.Key {
		it.Key = e.key
	} else {
		it.Key = strings.Clone(it.Key)
	}
}

// ownKeys replaces borrowed keys by copies (on paths that return early).
func ownKeys(items []store.Item) {
	for i := range items {
		ownKey(&items[i], nil)
	}
}

// Adjust implements store.Store.
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	d, wall := s.now()
	wall = s.wall(wall, d)
	for _, a := range adj {
		if a.Spec == nil || a.Key == "" || a.Spec.Kind == store.Concurrency || a.Delta == 0 {
			continue
		}
		if a.Delta < 0 && wall >= a.RefundBefore {
			continue // refilled or a new window: returning it would create credit
		}
		h := s.hash(a.Key)
		shd := &s.shards[shardOf(h)]
		shd.mu.Lock()
		if e := shd.m.get(h, a.Key); e != nil {
			adjustEntry(a, &e.entry, true, d, wall)
		} else if a.Delta > 0 && (shd.m.n+len(shd.leases) < s.perShard || s.makeRoom(shd, d)) {
			// The key was evicted (its state was new again): the charge
			// still counts, against a new state.
			if e := shd.m.insert(h, a.Key, entry{}); e != nil {
				adjustEntry(a, &e.entry, false, d, wall)
				s.keys.Add(1)
			}
		}
		shd.mu.Unlock()
	}
	return nil
}

func adjustEntry(a store.Adjustment, e *entry, exists bool, d, wall int64) {
	sp := a.Spec
	switch sp.Kind {
	case store.TokenBucket:
		p := &sp.Bucket
		tat, origin, phase := store.BucketState(p, e.a, e.b, uint64(e.c), exists, d)
		at := bucket.Instant{Elapsed: d - origin, Phase: phase}
		if a.Delta < 0 {
			tat = p.Refund(tat, -a.Delta)
		} else {
			tat = p.Charge(tat, at, a.Delta)
		}
		e.a, e.b, e.c = tat, origin, int64(phase)
		_, dec := p.Step(tat, at, 0)
		e.idle = idleAt(d, int64(dec.ResetAfter))
	case store.SlidingWindow, store.FixedWindow:
		idx := wall / int64(sp.Window.Window)
		if e.a != idx {
			if a.Delta < 0 {
				return
			}
			// A later window: count the charge in it (the window math
			// moves the old count to "previous" on the next decision).
			st := window.SlidingState{Index: e.a, Prev: e.b, Curr: e.c}
			st, _ = sp.Window.Sliding(st, wall, 0)
			if sp.Kind == store.FixedWindow {
				st = window.SlidingState{Index: idx}
			}
			e.a, e.b, e.c = st.Index, st.Prev, st.Curr
		}
		cnt := &e.c
		if sp.Kind == store.FixedWindow {
			cnt = &e.b
		}
		*cnt = max(*cnt+a.Delta, 0)
		e.idle = max(e.idle, idleAt(d, 2*int64(sp.Window.Window)))
	}
}

// step applies it to the key's state e (exists tells whether there is one).
func step(it store.Item, e entry, exists bool, d, wall int64) (entry, sluice.Decision) {
	sp := it.Spec
	if sp.Kind == store.FixedWindow {
		st := window.FixedState{Index: math.MinInt64}
		if exists {
			st = window.FixedState{Index: e.a, Count: e.b}
		}
		st, dec := sp.Window.Fixed(st, wall, it.Cost)
		return entry{a: st.Index, b: st.Count, idle: idleAt(d, int64(dec.ResetAfter))}, dec
	}
	if sp.Kind == store.SlidingWindow {
		st := window.SlidingState{Index: math.MinInt64}
		if exists {
			st = window.SlidingState{Index: e.a, Prev: e.b, Curr: e.c}
		}
		st, dec := sp.Window.Sliding(st, wall, it.Cost)
		return entry{a: st.Index, b: st.Prev, c: st.Curr, idle: idleAt(d, int64(dec.ResetAfter))}, dec
	}
	tat, origin, phase := store.BucketState(&sp.Bucket, e.a, e.b, uint64(e.c), exists, d)
	nt, dec := sp.Bucket.Step(tat, bucket.Instant{Elapsed: d - origin, Phase: phase}, it.Cost)
	return entry{a: nt, b: origin, c: int64(phase), idle: idleAt(d, int64(dec.ResetAfter))}, dec
}

// idleAt is d + wait, saturating: a bucket deep in debt reports waits near
// the largest duration, and an overflow would make it look idle (and be
// evicted, forgetting the debt).
func idleAt(d, wait int64) int64 {
	if wait > math.MaxInt64-d {
		return math.MaxInt64
	}
	return d + wait
}

// peekSlots decides a Concurrency item without taking the slot.
func (s *Store) peekSlots(shd *shard, it store.Item, d int64) sluice.Decision {
	sl := shd.leases[it.Key]
	live := int64(0)
	var first, last int64 = math.MaxInt64, 0
	if sl != nil {
		sl.prune(d)
		live = int64(len(sl.ids))
		for _, e := range sl.exp {
			first, last = min(first, e), max(last, e)
		}
	}
	max := it.Spec.MaxInFlight
	dec := sluice.Decision{}
	take := int64(0)
	if it.Cost > 0 {
		take = 1
	}
	if live+take <= max {
		dec.Allowed = true
		dec.Remaining = max - live - take
		if take > 0 {
			last = d + int64(it.Spec.LeaseTTL)
		}
	} else {
		dec.Remaining = 0
		dec.RetryAfter = time.Duration(first - d)
	}
	if last > d {
		dec.ResetAfter = time.Duration(last - d)
	}
	return dec
}

func (sl *slots) prune(d int64) {
	j := 0
	for i := range sl.ids {
		if sl.exp[i] > d {
			sl.ids[j], sl.exp[j] = sl.ids[i], sl.exp[i]
			j++
		}
	}
	sl.ids, sl.exp = sl.ids[:j], sl.exp[:j]
}

// idleGrace is how long a key stays idle before a routine sweep evicts it:
// a hot key that refills within nanoseconds would otherwise be deleted and
// re-inserted all the time. (Making room under the cap takes any idle key.)
const idleGrace = int64(10 * time.Second)

// sweep evicts a few long-idle keys of a shard every 32 operations.
func (s *Store) sweep(shd *shard, d int64) {
	shd.ops++
	if shd.ops%32 != 0 {
		return
	}
	s.evict(shd, d-idleGrace, 16)
}

// makeRoom evicts idle keys from a full shard; it reports whether there is
// room for one more.
func (s *Store) makeRoom(shd *shard, d int64) bool {
	s.evict(shd, d, 256)
	return shd.m.n+len(shd.leases) < s.perShard
}

// evict deletes keys idle at time d, examining at most budget of them.
func (s *Store) evict(shd *shard, d int64, budget int) {
	if s.noEvict {
		return
	}
	shd.m.scan(budget, func(e *entry) bool {
		if e.idle > d {
			return false
		}
		s.keys.Add(-1)
		s.evictions.Add(1)
		return true
	})
	n := 0
	for k, sl := range shd.leases {
		if n++; n > budget {
			break
		}
		if sl.prune(d); len(sl.ids) == 0 {
			delete(shd.leases, k)
			s.keys.Add(-1)
			s.evictions.Add(1)
		}
	}
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, lease store.Lease) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	for _, key := range lease.Keys {
		shd := &s.shards[s.shardOf(key)]
		shd.mu.Lock()
		if sl := shd.leases[key]; sl != nil {
			for i, id := range sl.ids {
				if id == lease.ID {
					last := len(sl.ids) - 1
					sl.ids[i], sl.exp[i] = sl.ids[last], sl.exp[last]
					sl.ids, sl.exp = sl.ids[:last], sl.exp[:last]
					break
				}
			}
		}
		shd.mu.Unlock()
	}
	return nil
}

// Close implements store.Store; later calls fail with store.ErrClosed.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
