// Package memstore is the in-process store.Store: sharded maps, one mutex
// per shard (held only for the transitions, never across I/O), idle keys
// evicted, and a hard cap on keys.
//
// Idle eviction changes no decision: a key is evicted as idle only once
// its state equals a new key's (a full token bucket, a sliding window
// whose counts have aged out, a slot set with no live slot). A key is
// idle from the time its state becomes a new key's: a bucket's when it is
// full again, a window's when its counts have aged out, a slot set's when
// its last slot expires or is released.
//
// The cap (WithMaxKeys) bounds memory against callers that invent keys. It
// counts every key held — token buckets, windows and slot sets — over the
// whole store, not per shard: a cap of N admits exactly N distinct keys,
// whatever their hashes (see WithMaxKeys for the one limit of a shard).
// A request that needs a new key while N are held first evicts idle keys,
// from any shard; when none is idle it evicts a bucket or window chosen by
// a CLOCK hand (approximately least recently used; see evictLRU: a key
// used since the hand last passed it — a use is any request that found
// it, admitted or refused, or an adjustment; a new key starts unmarked, so
// a flood of one-request keys evicts its own keys first — is not evicted
// before the hand has passed every other key held once more), one per new
// key it needs, so a flood of new keys never locks out new keys nor keys
// in use. A request refused by any
// of its items creates no key and evicts nothing, whatever the order of
// its items (so a limit that refuses a flood, in front of per-user keys,
// keeps it from pushing anyone out).
//
// An LRU eviction forgets state: the key's next request starts from a new
// key's state. So each LRU eviction of a key lets it be admitted at most
// what its state lacked of a new key's then: at most its capacity (a token
// bucket's B less the tokens it held, a window's weighted count, a fixed
// window's count, a quota's used cost), beyond it only for a bucket in
// debt (the tokens booked ahead or charged by settling, at most r·max_wait
// and one capacity) or a window over its limit from settling (at most one
// limit). A token bucket (B, r) evicted k times during an interval of
// length T is admitted at most (k+1)·B + r·T in it. Slot sets with live
// slots are never evicted (a live slot is a running call): with every key
// held a slot set with a live slot, a new key is refused as below.
// EvictionsByReason counts idle and LRU evictions apart.
//
// A key's penalty box (store.Spec.BlockFor, Spec.Penalize) is kept with its
// entry, in a map that exists only once a key is blocked: a blocked key is
// not idle before its block ends, whatever its state, so idle eviction
// never forgets a block; an LRU eviction at the cap forgets it with the
// state.
//
// With WithRefuseWhenFull the store evicts only idle keys: a request that
// needs a new key when none is idle is refused with a *store.FullError
// (matching store.ErrFull; fail closed: nothing is taken), whose
// RetryAfter says when a key will be idle, and existing keys keep working.
//
// Looking for idle keys costs no scan while none can be idle: each shard
// keeps a lower bound of its keys' idle times (exact after the shard is
// scanned, lowered by every write of an earlier one), and a shard is
// scanned (all its keys, evicting every idle one) only once that bound has
// passed, and then at most once per (its keys × 100 ns, at most 1 s): so a
// key that becomes idle less than that after its shard was last scanned
// may wait that long before it is found (and, at the cap, a key with
// state be evicted in its place). An eviction by the hand costs, over
// time, about one step per use or eviction (a use sets a key's mark, a
// step clears it; 64 marked keys in a row cost one step).
//
// The room an eviction makes is counted for the request that made it
// (other requests cannot take it first), so with LRU eviction a new key is
// refused only when every key held is a slot set with a live slot (then
// RetryAfter is as below), or, with RetryAfter 1 ns, when its shard holds
// MaxShardKeys or eight attempts found their room gone (a request whose own
// keys were evicted meanwhile). Otherwise a refusal's RetryAfter is the
// time until the earliest of the shards' bounds and rescan waits (64
// atomic reads, no scan). No key held becomes idle and evictable before it on its own — a
// slot released, a charge refunded, or a concurrent request that counted
// a new key and was then refused can make room sooner — so a retry any
// earlier is refused. It is exact (a key is idle then) when the bound of
// the shard holding the key with the earliest idle time is exact: that
// key was not used since the shard was last scanned, or it was new then.
// Else it is earlier than the truth, and a retry then may be refused with
// a later RetryAfter. A slot set is idle when its last slot expires or
// is released, so with every key a slot set held by live slots
// RetryAfter is the earliest such expiry; a bucket in unbounded debt is
// never idle. RetryAfter is 0 when no key held will ever be idle (or all
// the room is counted by requests in flight), else at least 1 ns. (This
// assumes a clock that does not go back; a WithClock clock may.)
package memstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// DefaultMaxKeys is the key cap unless WithMaxKeys sets another.
const DefaultMaxKeys = 1_000_000

const shardCount = 64

// MaxShardKeys is the most buckets and windows one shard holds (the
// indexes of its table are 24 bits); see WithMaxKeys.
const MaxShardKeys = maxEntries

// cleanCost is the time a shard waits between two scans for idle keys, per
// key scanned (a scan costs a few ns a key: the wait bounds the share of
// time spent scanning when a shard's bound of its idle times is stale),
// and maxCalm the longest such wait.
const (
	cleanCost = 100
	maxCalm   = int64(time.Second)
)

// maxAttempts is how many times a request needing a new key is decided
// when making room for it finds other requests took the room first (with
// LRU eviction, each attempt evicts the keys it needs).
const maxAttempts = 8

// Option configures New.
type Option func(*Store)

// WithClock makes the store read time from c (fake clocks in tests and the
// simulator); the default is the system clock, monotonic for buckets and
// slots, wall time for window boundaries.
func WithClock(c sluice.Clock) Option { return func(s *Store) { s.clock = c } }

// WithMaxKeys caps the keys held: buckets, windows and slot sets, all
// counted together over the whole store. A cap of n admits exactly n
// distinct keys whatever their hashes (Stats().Keys never exceeds n; keys
// being created by requests in flight count), and a request that would
// hold an (n+1)th first evicts an idle key, else one the CLOCK hand picks
// (or, WithRefuseWhenFull, is refused with a *store.FullError). One limit
// applies besides: a shard holds at
// most MaxShardKeys buckets and windows, so a cap above MaxShardKeys is
// exact only while no shard (of 64, picked by a hash with a secret
// per-store seed) would hold more. n < 1 means DefaultMaxKeys.
func WithMaxKeys(n int) Option {
	return func(s *Store) {
		if n >= 1 {
			s.maxKeys = int64(n)
		}
	}
}

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	clock     sluice.Clock
	t0        time.Time
	maxKeys   int64
	seed      maphash.Seed
	slotBase  string
	slotSeq   atomic.Uint64
	keys      atomic.Int64
	evictions atomic.Uint64
	scans     atomic.Uint64 // shards scanned by clean
	closed    atomic.Bool
	noEvict   bool // tests: keep every key
	// refuseFull keeps keys in use at the cap (WithRefuseWhenFull): a new
	// key finding no idle key to evict is refused, not given the room of
	// a key with state.
	refuseFull bool
	lruEvicted atomic.Uint64             // of evictions, keys with state (lru.go)
	hand       clockHand                 // the CLOCK hand's lap and shard (lru.go)
	onLRU      func(key string, d int64) // tests: each key evicted with state
	onPass     func(key string)          // tests: each key whose use mark the hand cleared
	shards     [shardCount]shard
}

type shard struct {
	mu       sync.Mutex
	m        table
	slotSets map[string]*slotSet
	ops      uint32
	// low is at most the idle time (ns since t0) of every key the shard
	// holds (math.MaxInt64: none will be idle): exact after clean, lowered
	// by every write of an earlier idle time (noteIdle).
	low int64
	// calm is the earliest time clean scans the shard again.
	calm int64
	// wake is max(low, calm), read without the lock: clean evicts nothing
	// from the shard before it.
	wake atomic.Int64
	// lap is the last lap of the CLOCK hand finished in the shard (lru.go).
	lap uint64
	// specs holds the spec a key's state was last written under when it
	// is not the key's usual one (store.Item.Base; respec.go).
	specs map[string]*store.Spec
	// memo is the last lookup in specs (respec.go).
	memo specMemo
	// fair holds the tenant sets of fair-share keys (fairshare.go).
	fair fairSets
}

// entry is a key's state (its meaning is its spec's kind's: see
// store.State) and the time (ns since t0) from which the state is new
// again (the key is idle and can be evicted). Its use mark is the table's
// (table.marks).
type entry struct {
	st   store.State
	idle int64
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
	var b [8]byte
	rand.Read(b[:])
	s.slotBase = strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36) + "-"
	for i := range s.shards {
		s.shards[i].m.seed = s.seed
		s.shards[i].slotSets = map[string]*slotSet{}
		s.shards[i].low, s.shards[i].calm = math.MaxInt64, math.MinInt64
		s.shards[i].wake.Store(math.MaxInt64)
	}
	return s
}

// Stats returns the keys held (counting those requests in flight are
// creating; never more than the cap) and evictions so far.
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

// nowAt is now, from at when it is a reading of the system clock the
// caller made (and the store has no Clock).
func (s *Store) nowAt(at *time.Time) (int64, int64) {
	if at != nil && s.clock == nil {
		return int64(at.Sub(s.t0)), 0
	}
	return s.now()
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

// Take implements store.Store. A request needing a new key while the store
// holds its cap makes room by evicting idle keys, else keys the CLOCK hand
// picks (see the package documentation).
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	return s.take(items, false, 1, 0, nil)
}

// TakeBorrowed implements store.KeyBorrower: items' keys may alias memory
// the caller reuses after the call. The store copies a key it keeps (a new
// key's, a slot's) and, on return, every Item.Key is a string the caller
// may keep: the store's own copy where it holds the key (no allocation for
// a decision on an existing key), else a fresh copy.
func (s *Store) TakeBorrowed(ctx context.Context, items []store.Item) (store.Result, error) {
	return s.take(items, true, 1, 0, nil)
}

// TakeBorrowedAt is TakeBorrowed deciding at now, a reading of the system
// clock (time.Now, with its monotonic reading) the caller has just made,
// so that a caller that reads the clock anyway (the limiter, for an
// override's last_matched_at) does not make the store read it again. A
// store WithClock reads its own clock (now is ignored). Decisions are the same as TakeBorrowed's at now: a
// reading made before the shard's lock is taken, as TakeBorrowed's own is.
func (s *Store) TakeBorrowedAt(ctx context.Context, items []store.Item, now time.Time) (store.Result, error) {
	return s.take(items, true, 1, 0, &now)
}

// take decides items; attempt counts the decisions of this request (a
// new key that found no room makes room and decides again), and credit is
// the keys counted against the cap for it by the room made (its new keys
// use them first; what they do not use is given back).
//
// at is the time to decide at (a time.Now reading; nil: read the clock).
func (s *Store) take(items []store.Item, borrowed bool, attempt, credit int, at *time.Time) (store.Result, error) {
	if s.closed.Load() {
		s.giveBack(credit)
		if borrowed {
			ownKeys(items)
		}
		return store.Result{}, store.ErrClosed
	}
	if err := store.Validate(items); err != nil {
		s.giveBack(credit)
		if borrowed {
			ownKeys(items)
		}
		return store.Result{}, err
	}
	d, wall := s.nowAt(at)
	if len(items) == 1 { // one shard: no ordering, no scratch arrays
		h := s.hash(items[0].Key)
		shd := &s.shards[shardOf(h)]
		shd.mu.Lock()
		res, err := s.take1(shd, h, &items[0], d, wall, borrowed, &credit)
		if err == nil {
			s.sweep(shd, d)
		}
		shd.mu.Unlock()
		s.giveBack(credit)
		if err == errNoRoom {
			return s.retry(items, borrowed, attempt, noRoom{keys: s.keys.Load(), need: 1}, d)
		}
		return res, err
	}
	return s.takeMany(items, borrowed, attempt, d, wall, credit)
}

// many is takeMany's working state: per item its hash, shard, entry and
// next state, and the shards locked (each once, in ascending order).
type many struct {
	itemShard, locked []int
	ents              []*tentry
	next              []entry
	hashes            []uint64
	rm                room
}

// takeMany decides a request of several items: it locks every shard
// involved in ascending order, decides each item, then either refuses
// (nothing taken) or commits every item.
func (s *Store) takeMany(items []store.Item, borrowed bool, attempt int, d, wall int64, credit int) (store.Result, error) {
	var shBuf, lockBuf [8]int
	var entBuf [8]*tentry
	var nextBuf [8]entry
	var hashBuf [8]uint64
	m := many{itemShard: shBuf[:0], locked: lockBuf[:0], ents: entBuf[:0], next: nextBuf[:0], hashes: hashBuf[:0], rm: room{held: credit}}
	for _, it := range items {
		h := s.hash(it.Key)
		m.hashes = append(m.hashes, h)
		m.itemShard = append(m.itemShard, shardOf(h))
		m.ents = append(m.ents, nil)
		m.next = append(m.next, entry{})
	}
	m.locked = append(m.locked, m.itemShard...)
	slices.Sort(m.locked)
	m.locked = slices.Compact(m.locked) // each shard once, in order
	for _, x := range m.locked {
		s.shards[x].mu.Lock()
	}
	res := store.Result{Allowed: true}
	short := -1 // the first item whose new key found no room
	for i := range items {
		it := &items[i]
		shd := &s.shards[m.itemShard[i]]
		var isNew bool
		if it.Spec.HoldsSlots() {
			var sl *slotSet
			it.Decision, sl = s.peekSlots(shd, *it, d)
			it.Wait, isNew = 0, sl == nil
		} else {
			e := shd.m.get(m.hashes[i], it.Key)
			m.ents[i] = e
			var cur entry
			if e != nil {
				cur = e.entry
			}
			exists := e != nil
			if it.Base != nil || len(shd.specs) > 0 {
				cur, exists = shd.asSpec(e, it.Spec, it.Base, cur, d, s.wall(wall, d))
			}
			m.next[i], it.Decision, it.Wait = decide(shd, it, cur, exists, d, s.wall(wall, d))
			if it.Spec.BlockFor > 0 {
				it.Decision = penalize(shd, e, it, it.Decision, d, s.wall(wall, d))
			}
			isNew = e == nil
		}
		if !it.Decision.Allowed {
			res.Allowed = false
		}
		// A new key needs room, unless the request is refused anyway
		// (then it creates nothing) or the item only peeks. Without room
		// the other items are still decided: a request one of them
		// refuses is refused, and makes no room (evicts nothing).
		if short < 0 && isNew && res.Allowed && it.Cost > 0 && !s.roomFor(&m.rm, items[:i+1], m.ents, m.itemShard, m.locked, d) {
			short = i
		}
	}
	if short >= 0 && res.Allowed {
		need, _ := s.keysNeeded(items, m.ents, m.itemShard)
		nr := noRoom{item: short, keys: s.keys.Load(), need: max(need, 1)} // (what it counted is given back)
		s.keys.Add(-int64(m.rm.held))
		s.unlock(m.locked)
		return s.retry(items, borrowed, attempt, nr, d)
	}
	if !res.Allowed {
		s.refuseMany(items, &m, borrowed, d, wall)
	} else {
		s.commitMany(items, &m, &res, borrowed, d, wall)
	}
	s.unlock(m.locked)
	return res, nil
}

// refuseMany reports, for a refused request, each item's state as it is
// (nothing was taken) and gives back the keys counted for it.
func (s *Store) refuseMany(items []store.Item, m *many, borrowed bool, d, wall int64) {
	s.keys.Add(-int64(m.rm.held))
	for i := range items {
		items[i].Wait = 0
		if it := &items[i]; it.Decision.Allowed && it.Cost > 0 {
			// Its state as it is; it alone would admit (or book).
			it.Decision = s.peek(&s.shards[m.itemShard[i]], *it, m.ents[i], d, wall)
			it.Decision.Allowed, it.Decision.RetryAfter = true, 0
		}
		if borrowed {
			ownKey(&items[i], m.ents[i]) // (nil for Concurrency items)
		}
	}
}

// commitMany takes every item of an admitted request (its shards locked).
func (s *Store) commitMany(items []store.Item, m *many, res *store.Result, borrowed bool, d, wall int64) {
	for i := range items {
		it := &items[i]
		shd := &s.shards[m.itemShard[i]]
		if it.Spec.HoldsSlots() {
			if borrowed {
				ownKey(it, nil)
			}
			if s.takeSlot(shd, it, d, res) {
				m.rm.held--
			}
			continue
		}
		if it.Cost > 0 {
			it.RefundBefore = store.RefundBefore(it.Spec, s.wall(wall, d), it.Decision.ResetAfter)
			if it.Spec.FairShare != nil {
				shd.commitShare(it.Key) // (fairshare.go)
			}
		}
		res.Wait = max(res.Wait, it.Wait)
		e := m.ents[i]
		if m.rm.made && e != nil && e.key != it.Key {
			e = nil // evicted to make room (it was idle: the same as new)
		}
		if e != nil {
			e.entry = m.next[i] // in place: no second map operation
			shd.m.holdIdle(e)
		} else if it.Cost > 0 { // a peek creates nothing
			if e = s.insert(shd, m.hashes[i], it.Key, m.next[i], borrowed); e != nil {
				m.rm.held--
				shd.noteIdle(m.next[i].idle)
				if it.Base != nil || len(shd.specs) > 0 {
					shd.wrote(e.key, it.Spec, it.Base) // (an existing key's: asSpec)
				}
			}
		}
		if borrowed {
			ownKey(it, e)
		}
	}
	if m.rm.held != 0 {
		s.keys.Add(-int64(m.rm.held)) // counted, not used
	}
	for _, x := range m.locked {
		s.sweep(&s.shards[x], d)
	}
}

// unlock unlocks the shards locked.
func (s *Store) unlock(locked []int) {
	for _, x := range locked {
		s.shards[x].mu.Unlock()
	}
}

// take1 decides a single item in its locked shard; errNoRoom when its new
// key finds no room in the cap (nor in credit) nor in the shard.
func (s *Store) take1(shd *shard, h uint64, it *store.Item, d, wall int64, borrowed bool, credit *int) (store.Result, error) {
	res := store.Result{Allowed: true}
	if it.Spec.HoldsSlots() {
		var sl *slotSet
		it.Decision, sl = s.peekSlots(shd, *it, d)
		it.Wait = 0
		if res.Allowed = it.Decision.Allowed; res.Allowed && it.Cost > 0 && sl == nil && !s.room1(shd, d, false, credit) {
			return store.Result{}, errNoRoom
		}
		if borrowed {
			ownKey(it, nil)
		}
		if res.Allowed && it.Cost > 0 {
			s.takeSlot(shd, it, d, &res) // (counted by room1 if new)
		}
		return res, nil
	}
	e := shd.m.get(h, it.Key)
	var cur entry
	exists := e != nil
	if e != nil {
		cur = e.entry
		if (it.Base != nil || len(shd.specs) > 0) && !shd.written(e, it.Spec) {
			cur, exists = shd.respec(e, it.Spec, it.Base, cur, d, s.wall(wall, d))
		}
	} else if it.Cost > 0 && !s.room1(shd, d, true, credit) {
		return store.Result{}, errNoRoom
	}
	next, dec, wait := decide(shd, it, cur, exists, d, s.wall(wall, d))
	if it.Spec.BlockFor > 0 {
		dec = penalize(shd, e, it, dec, d, s.wall(wall, d))
	}
	it.Decision, it.Wait = dec, 0
	res.Allowed = dec.Allowed
	if dec.Allowed {
		it.Wait, res.Wait = wait, wait
	}
	if dec.Allowed && it.Cost > 0 {
		it.RefundBefore = store.RefundBefore(it.Spec, s.wall(wall, d), dec.ResetAfter)
		if it.Spec.FairShare != nil {
			shd.commitShare(it.Key) // (fairshare.go)
		}
		if e != nil {
			e.entry = next // (a take makes no key idle sooner: see noteIdle)
			shd.m.holdIdle(e)
		} else if e = s.insert(shd, h, it.Key, next, borrowed); e != nil {
			shd.noteIdle(next.idle)
			if it.Base != nil || len(shd.specs) > 0 {
				shd.wrote(e.key, it.Spec, it.Base) // (an existing key's: asSpec)
			}
		} else {
			s.keys.Add(-1) // (room1 checked the table has room)
		}
	} else if e != nil && dec.Allowed {
		e.entry = next // a peek brings the state forward (as Take with several items does)
		shd.m.holdIdle(e)
	} else if e == nil && it.Cost > 0 {
		s.keys.Add(-1) // refused: the new key room1 counted is not created
	}
	if borrowed {
		ownKey(it, e)
	}
	return res, nil
}

// peek is item it's decision at cost 0 (its state as it is), for a refused
// request whose other items refused: e is its entry (nil: none).
func (s *Store) peek(shd *shard, it store.Item, e *tentry, d, wall int64) sluice.Decision {
	it.Cost = 0
	if it.Spec.HoldsSlots() {
		dec, _ := s.peekSlots(shd, it, d)
		return dec
	}
	if e != nil && e.key != it.Key {
		e = nil // evicted to make room (it was idle: the same as new)
	}
	var cur entry
	if e != nil {
		cur = e.entry
	}
	exists := e != nil
	if it.Base != nil || len(shd.specs) > 0 {
		cur, exists = shd.asSpec(e, it.Spec, it.Base, cur, d, s.wall(wall, d))
	}
	_, dec := step(&it, cur, exists, d, s.wall(wall, d))
	return dec
}

// Close implements store.Store; later calls fail with store.ErrClosed.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
