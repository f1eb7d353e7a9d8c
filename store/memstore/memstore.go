// Package memstore is the in-process store.Store: sharded maps, one mutex
// per shard (held only for the transitions, never across I/O), idle keys
// evicted, and a hard cap on keys.
//
// Eviction changes no decision: a key is evicted only once its state equals
// a new key's (a full token bucket, a sliding window whose counts have
// aged out, a lease set with no live lease). A key is idle from the time
// its state becomes a new key's: a bucket's when it is full again, a
// window's when its counts have aged out, a lease set's when its last
// lease expires or is released.
//
// The cap (WithMaxKeys) bounds memory against callers that invent keys. It
// counts every key held — token buckets, windows and lease sets — over the
// whole store, not per shard: a cap of N admits exactly N distinct keys,
// whatever their hashes (see WithMaxKeys for the one limit of a shard).
// A request that needs a new key while N are held first evicts idle keys,
// from any shard; when none is idle it is refused with a *store.FullError
// (matching store.ErrFull; fail closed: nothing is taken), whose
// RetryAfter says when a key will be idle, and existing keys keep working.
//
// Looking for idle keys costs no scan while none can be idle: each shard
// keeps a lower bound of its keys' idle times (exact after the shard is
// scanned, lowered by every write of an earlier one), and a shard is
// scanned (all its keys, evicting every idle one) only once that bound has
// passed, and then at most once per (its keys × 100 ns, at most 1 s): so a
// key that becomes idle less than that after its shard was last scanned
// may wait that long before it is found.
//
// A refusal's FullError.RetryAfter is the time until the earliest of the
// shards' bounds and rescan waits (64 atomic reads, no scan). No key held
// becomes idle and evictable before it on its own — a lease released, a
// charge refunded, or a concurrent request that counted a new key and was
// then refused can make room sooner — so a retry any earlier is refused.
// It is exact (a key is idle then) when the bound of the shard holding the
// key with the earliest idle time is exact: that key was not used since
// the shard was last scanned, or it was new then. Else it is earlier than
// the truth, and a retry then may be refused with a later RetryAfter. A
// lease set is idle when its last lease expires or is released, so with
// every key a lease set held by live slots RetryAfter is the earliest such
// expiry; a bucket in unbounded debt is never idle. RetryAfter is 0 when
// no key held will ever be idle (or all the room is counted by requests
// in flight), else at least 1 ns. (This assumes a clock that does not go
// back; a WithClock clock may.)
package memstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
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
// when making room for it finds other requests took the room first.
const maxAttempts = 3

// Option configures New.
type Option func(*Store)

// WithClock makes the store read time from c (fake clocks in tests and the
// simulator); the default is the system clock, monotonic for buckets and
// leases, wall time for window boundaries.
func WithClock(c sluice.Clock) Option { return func(s *Store) { s.clock = c } }

// WithMaxKeys caps the keys held: buckets, windows and lease sets, all
// counted together over the whole store. A cap of n admits exactly n
// distinct keys whatever their hashes (Stats().Keys never exceeds n; keys
// being created by requests in flight count), and a request that would
// hold an (n+1)th is refused with a *store.FullError unless an idle key can
// be evicted to make room. One limit applies besides: a shard holds at
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
	leaseBase string
	leaseSeq  atomic.Uint64
	keys      atomic.Int64
	evictions atomic.Uint64
	scans     atomic.Uint64 // shards scanned by clean
	closed    atomic.Bool
	noEvict   bool // tests: keep every key
	shards    [shardCount]shard
}

type shard struct {
	mu     sync.Mutex
	m      table
	leases map[string]*slots
	ops    uint32
	// low is at most the idle time (ns since t0) of every key the shard
	// holds (math.MaxInt64: none will be idle): exact after clean, lowered
	// by every write of an earlier idle time (noteIdle).
	low int64
	// calm is the earliest time clean scans the shard again.
	calm int64
	// wake is max(low, calm), read without the lock: clean evicts nothing
	// from the shard before it.
	wake atomic.Int64
	_    [16]byte
}

// entry is a key's state: for a token bucket (tat, origin, phase), for a
// sliding window (index, prev, curr); idle is the time (ns since t0) from
// which the state equals a new key's.
// entry is a key's state (its meaning is its spec's kind's: see
// store.State) and the time (ns since t0) from which the state is new again
// (the key is idle and can be evicted).
type entry struct {
	st   store.State
	idle int64
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
	var b [8]byte
	rand.Read(b[:])
	s.leaseBase = strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36) + "-"
	for i := range s.shards {
		s.shards[i].m.seed = s.seed
		s.shards[i].leases = map[string]*slots{}
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
// holds its cap is refused with a *store.FullError unless idle keys can be
// evicted to make room (see the package documentation).
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	return s.take(items, false, 1)
}

// TakeBorrowed implements store.KeyBorrower: items' keys may alias memory
// the caller reuses after the call. The store copies a key it keeps (a new
// key's, a lease's) and, on return, every Item.Key is a string the caller
// may keep: the store's own copy where it holds the key (no allocation for
// a decision on an existing key), else a fresh copy.
func (s *Store) TakeBorrowed(ctx context.Context, items []store.Item) (store.Result, error) {
	return s.take(items, true, 1)
}

// errNoRoom is take1's report that a new key found no room in the cap nor
// in the shard it holds locked.
var errNoRoom = errors.New("memstore: no room")

// noRoom goes with errNoRoom: the item whose new key found no room, and
// the keys held then.
type noRoom struct {
	item int
	keys int64
}

// take decides items; attempt counts the decisions of this request (a
// new key that found no room makes room and decides again).
func (s *Store) take(items []store.Item, borrowed bool, attempt int) (store.Result, error) {
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
		if err == errNoRoom {
			return s.retry(items, borrowed, attempt, noRoom{keys: s.keys.Load()}, d)
		}
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

	res := store.Result{Allowed: true}
	var rm room
	for i := range items {
		it := &items[i]
		shd := &s.shards[itemShard[i]]
		var isNew bool
		switch it.Spec.Kind {
		case store.Concurrency:
			var sl *slots
			it.Decision, sl = s.peekSlots(shd, *it, d)
			isNew = sl == nil
		default:
			e := shd.m.get(hashes[i], it.Key)
			ents[i] = e
			var cur entry
			if e != nil {
				cur = e.entry
			}
			next[i], it.Decision = step(*it, cur, e != nil, d, s.wall(wall, d))
			isNew = e == nil
		}
		if !it.Decision.Allowed {
			res.Allowed = false
		}
		// A new key needs room, unless the request is refused anyway
		// (then it creates nothing) or the item only peeks.
		if isNew && res.Allowed && it.Cost > 0 && !s.roomFor(&rm, items[:i+1], ents, itemShard, locked, d) {
			nr := noRoom{item: i, keys: s.keys.Load()}
			s.keys.Add(-int64(rm.held))
			s.unlock(locked)
			return s.retry(items, borrowed, attempt, nr, d)
		}
	}
	if !res.Allowed {
		s.keys.Add(-int64(rm.held))
		for i := range items {
			if it := &items[i]; it.Decision.Allowed && it.Cost > 0 {
				// Nothing was taken: report this item's state as it is.
				it.Decision = s.peek(&s.shards[itemShard[i]], *it, ents[i], d, wall)
			}
			if borrowed {
				ownKey(&items[i], ents[i]) // (nil for Concurrency items)
			}
		}
		s.unlock(locked)
		return res, nil
	}
	for i := range items {
		it := &items[i]
		shd := &s.shards[itemShard[i]]
		if it.Spec.HoldsSlots() {
			if borrowed {
				ownKey(it, nil)
			}
			if s.takeSlot(shd, it, d, &res) {
				rm.held--
			}
			continue
		}
		if it.Cost > 0 {
			it.RefundBefore = store.RefundBefore(it.Spec, s.wall(wall, d), it.Decision.ResetAfter)
		}
		e := ents[i]
		if rm.made && e != nil && e.key != it.Key {
			e = nil // evicted to make room (it was idle: the same as new)
		}
		if e != nil {
			e.entry = next[i] // in place: no second map operation
		} else if it.Cost > 0 { // a peek creates nothing
			if e = s.insert(shd, hashes[i], it.Key, next[i], borrowed); e != nil {
				rm.held--
				shd.noteIdle(next[i].idle)
			}
		}
		if borrowed {
			ownKey(it, e)
		}
	}
	if rm.held != 0 {
		s.keys.Add(-int64(rm.held)) // counted, not used
	}
	for _, x := range locked {
		s.sweep(&s.shards[x], d)
	}
	s.unlock(locked)
	return res, nil
}

// unlock unlocks the shards locked.
func (s *Store) unlock(locked []int) {
	for _, x := range locked {
		s.shards[x].mu.Unlock()
	}
}

// retry makes room for a request whose new key (item nr.item) found none
// at time d, in every shard, holding no lock but the one being cleaned
// (so that it cannot deadlock with take's ordered locking), and decides
// the request again (nothing was taken); a FullError when there is still
// no room or this was the last attempt.
func (s *Store) retry(items []store.Item, borrowed bool, attempt int, nr noRoom, d int64) (store.Result, error) {
	if attempt >= maxAttempts || !s.makeRoom(d) {
		if borrowed {
			ownKeys(items)
		}
		return store.Result{}, s.fullError(items[nr.item].Key, nr.keys, d)
	}
	return s.take(items, borrowed, attempt+1)
}

// room is a request's account of the keys it counts against the cap.
type room struct {
	held    int  // keys counted for the request's new keys
	made    bool // it evicted keys (an earlier item's entry may be gone)
	cleaned bool // it cleaned the shards it holds
}

// roomFor makes r count the keys that items, decided so far in their
// locked shards (the last one needing a new key), would create: from the
// cap's free room, else by evicting the idle keys of the shards locked
// (their counts become the request's). False when there is no room (the
// keys r counts are left for the caller to release).
func (s *Store) roomFor(r *room, items []store.Item, ents []*tentry, itemShard, locked []int, d int64) bool {
	last := &items[len(items)-1]
	shd := &s.shards[itemShard[len(items)-1]]
	for {
		need, inTables := s.keysNeeded(items, ents, itemShard)
		tableRoom := last.Spec.HoldsSlots() || shd.m.n+inTables <= maxEntries
		if r.held < need {
			r.held += s.reserve(need - r.held)
		}
		if r.held >= need && tableRoom {
			return true
		}
		if r.cleaned {
			return false
		}
		r.cleaned = true
		for _, x := range locked {
			if n := s.clean(&s.shards[x], d); n > 0 {
				r.held += n
				r.made = true
			}
		}
	}
}

// keysNeeded counts the keys items (decided so far, in their locked
// shards) would create if admitted: new keys and keys whose idle entry was
// evicted to make room; inTables counts those that are buckets or windows.
func (s *Store) keysNeeded(items []store.Item, ents []*tentry, itemShard []int) (need, inTables int) {
	for j := range items {
		it := &items[j]
		if it.Cost == 0 || !it.Decision.Allowed {
			continue
		}
		if it.Spec.HoldsSlots() {
			if s.shards[itemShard[j]].leases[it.Key] == nil {
				need++
			}
		} else if e := ents[j]; e == nil || e.key != it.Key {
			need++
			inTables++
		}
	}
	return need, inTables
}

// take1 decides a single item in its locked shard; errNoRoom when its new
// key finds no room in the cap nor in the shard.
func (s *Store) take1(shd *shard, h uint64, it *store.Item, d, wall int64, borrowed bool) (store.Result, error) {
	res := store.Result{Allowed: true}
	if it.Spec.HoldsSlots() {
		var sl *slots
		it.Decision, sl = s.peekSlots(shd, *it, d)
		if res.Allowed = it.Decision.Allowed; res.Allowed && it.Cost > 0 && sl == nil && !s.room1(shd, d, false) {
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
	if e != nil {
		cur = e.entry
	} else if it.Cost > 0 && !s.room1(shd, d, true) {
		return store.Result{}, errNoRoom
	}
	next, dec := step(*it, cur, e != nil, d, s.wall(wall, d))
	it.Decision = dec
	res.Allowed = dec.Allowed
	if dec.Allowed && it.Cost > 0 {
		it.RefundBefore = store.RefundBefore(it.Spec, s.wall(wall, d), dec.ResetAfter)
		if e != nil {
			e.entry = next // (a take makes no key idle sooner: see noteIdle)
		} else if e = s.insert(shd, h, it.Key, next, borrowed); e != nil {
			shd.noteIdle(next.idle)
		} else {
			s.keys.Add(-1) // (room1 checked the table has room)
		}
	} else if e != nil && dec.Allowed {
		e.entry = next // a peek brings the state forward (as Take with several items does)
	} else if e == nil && it.Cost > 0 {
		s.keys.Add(-1) // refused: the new key room1 counted is not created
	}
	if borrowed {
		ownKey(it, e)
	}
	return res, nil
}

// room1 counts one new key for locked shard shd (a bucket or window when
// inTable) against the cap, evicting the shard's idle keys if there is no
// room; false (nothing counted) when there is none.
func (s *Store) room1(shd *shard, d int64, inTable bool) bool {
	if (!inTable || shd.m.n < maxEntries) && s.reserve(1) == 1 {
		return true
	}
	n := s.clean(shd, d)
	if inTable && shd.m.n >= maxEntries {
		s.keys.Add(-int64(n))
		return false
	}
	switch {
	case n > 0:
		s.keys.Add(-int64(n - 1)) // the evicted keys' counts, one kept for the new key
		return true
	case s.reserve(1) == 1: // (the table was at its limit, the cap not)
		return true
	}
	return false
}

// reserve counts up to n new keys against the cap and returns how many.
func (s *Store) reserve(n int) int {
	for {
		k := s.keys.Load()
		got := min(int64(n), s.maxKeys-k)
		if got <= 0 {
			return 0
		}
		if s.keys.CompareAndSwap(k, k+got) {
			return int(got)
		}
	}
}

// insert adds a new key's entry (copying a borrowed key), already counted
// against the cap; nil when the shard's table is at its limit.
func (s *Store) insert(shd *shard, h uint64, key string, e entry, borrowed bool) *tentry {
	if borrowed {
		key = strings.Clone(key)
	}
	return shd.m.insert(h, key, e)
}

// noteIdle records that a key of locked shard shd is idle from t: every
// write of an idle time that may be earlier than the key's last calls it
// (a new key, an adjustment, a released lease), so that low stays a lower
// bound. Take on a key it holds does not need to: a take or a peek never
// makes a bucket full sooner nor a window's counts age out sooner (the
// state only moves forward), so the key's idle time only grows
// (TestIdleBoundsHold checks it). A clock set back can break this: then
// eviction may wait longer, and RetryAfter be late; no decision changes.
func (shd *shard) noteIdle(t int64) {
	if t < shd.low {
		shd.low = t
		shd.wake.Store(max(t, shd.calm))
	}
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
	_, dec := step(it, cur, e != nil, d, s.wall(wall, d))
	return dec
}

// takeSlot takes an in-flight slot for a Concurrency item (whose key the
// store may keep); it reports whether it created the key's lease set (a
// new key, which the caller has counted against the cap).
func (s *Store) takeSlot(shd *shard, it *store.Item, d int64, res *store.Result) bool {
	if it.Cost == 0 {
		return false
	}
	if res.Lease.ID == "" {
		res.Lease.ID = s.leaseBase + strconv.FormatUint(s.leaseSeq.Add(1), 36)
	}
	sl := shd.leases[it.Key]
	created := sl == nil
	if created {
		sl = &slots{}
		shd.leases[it.Key] = sl
	}
	exp := d + int64(it.Spec.LeaseTTL)
	sl.ids = append(sl.ids, res.Lease.ID)
	sl.exp = append(sl.exp, exp)
	res.Lease.Keys = append(res.Lease.Keys, it.Key)
	if created && exp < shd.low { // (a set's idle time only grows with its slots)
		shd.noteIdle(exp)
	}
	return created
}

// fullError is the refusal of new key at time d, keys being held; its
// RetryAfter is the time from d to the earliest of the shards' wake times
// (see the package documentation for what it guarantees).
func (s *Store) fullError(key string, keys, d int64) error {
	w := int64(math.MaxInt64)
	for i := range s.shards {
		w = min(w, s.shards[i].wake.Load())
	}
	var after time.Duration
	if w != math.MaxInt64 && !s.noEvict {
		after = time.Duration(max(w-d, 1))
	}
	return &store.FullError{Keys: keys, Cap: s.maxKeys, Key: strings.Clone(key), RetryAfter: after}
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

// Adjust implements store.Store. A charge to a key that was evicted needs
// a new key: when the store holds its cap and no idle key can be evicted,
// that charge is dropped, and Adjust, having applied the others, returns a
// *store.FullError for the first such key.
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	d, wall := s.now()
	wall = s.wall(wall, d)
	var err error
	for _, a := range adj {
		if a.Spec == nil || a.Key == "" || a.Spec.HoldsSlots() || a.Delta == 0 {
			continue
		}
		if a.Delta < 0 && wall >= a.RefundBefore {
			continue // refilled or a new window: returning it would create credit
		}
		h := s.hash(a.Key)
		shd := &s.shards[shardOf(h)]
		shd.mu.Lock()
		ok := s.adjust1(shd, h, a, d, wall)
		shd.mu.Unlock()
		if !ok && s.makeRoom(d) { // (holding no lock, as in take)
			shd.mu.Lock()
			ok = s.adjust1(shd, h, a, d, wall)
			shd.mu.Unlock()
		}
		if !ok && err == nil {
			err = s.fullError(a.Key, s.keys.Load(), d)
		}
	}
	return err
}

// adjust1 applies a in its locked shard; false when it needs a new key and
// finds no room.
func (s *Store) adjust1(shd *shard, h uint64, a store.Adjustment, d, wall int64) bool {
	e := shd.m.get(h, a.Key)
	exists := e != nil
	if !exists {
		if a.Delta < 0 {
			return true // nothing to return to
		}
		// The key was evicted (its state was new again): the charge
		// still counts, against a new state.
		if !s.room1(shd, d, true) {
			return false
		}
		if e = shd.m.insert(h, a.Key, entry{}); e == nil { // (room1 saw room in the table)
			s.keys.Add(-1)
			return false
		}
	}
	adjustEntry(a, &e.entry, exists, d, wall)
	if e.idle < shd.low {
		shd.noteIdle(e.idle) // (a refund makes a key idle sooner)
	}
	return true
}

// adjustEntry applies a to the key's state e (exists tells whether it
// had one) by the kind's rule.
func adjustEntry(a store.Adjustment, e *entry, exists bool, d, wall int64) {
	st, dec, ok := a.Spec.Adjust(e.st, exists, store.Now{Mono: d, Wall: wall}, a.Delta)
	if !ok {
		return
	}
	// The idle time exactly, as step sets it: a later take must not find
	// it earlier (see noteIdle).
	e.st, e.idle = st, idleAt(d, int64(dec.ResetAfter))
}

// step applies it to the key's state e (exists tells whether there is one)
// by the kind's rule.
func step(it store.Item, e entry, exists bool, d, wall int64) (entry, sluice.Decision) {
	st, dec := it.Spec.Step(e.st, exists, store.Now{Mono: d, Wall: wall}, it.Cost)
	return entry{st: st, idle: idleAt(d, int64(dec.ResetAfter))}, dec
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

// peekSlots decides a Concurrency item without taking the slot; it returns
// the key's lease set too (nil: none).
func (s *Store) peekSlots(shd *shard, it store.Item, d int64) (sluice.Decision, *slots) {
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
	return dec, sl
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
// A sweep only deletes keys, so the shards' bounds (low) stay true.
const idleGrace = int64(10 * time.Second)

// sweep evicts a few long-idle keys of a shard every 32 operations.
func (s *Store) sweep(shd *shard, d int64) {
	shd.ops++
	if shd.ops%32 != 0 {
		return
	}
	s.evict(shd, d-idleGrace, 16)
}

// makeRoom cleans every shard that may hold a key idle at d, locking one
// shard at a time and called holding none (so it cannot deadlock with
// take's ordered locking, nor make it wait long); it reports whether the
// cap has room for a new key now. A shard whose wake time is after d holds
// no evictable key and costs one atomic read.
func (s *Store) makeRoom(d int64) bool {
	for i := range s.shards {
		shd := &s.shards[i]
		if d < shd.wake.Load() {
			continue
		}
		shd.mu.Lock()
		n := s.clean(shd, d)
		shd.mu.Unlock()
		if n > 0 {
			s.keys.Add(-int64(n))
		}
	}
	return s.keys.Load() < s.maxKeys
}

// clean evicts every key of locked shard shd idle at d, when one may be
// (d is at or past the shard's wake time), and returns how many it
// evicted, leaving their count in s.keys for the caller (who either
// releases it or counts its own new keys with it). It scans all the
// shard's keys, so afterwards low is exact; and it sets calm so that the
// shard is not scanned again for (keys scanned × cleanCost, at most
// maxCalm), which bounds the time spent scanning when low is stale (the
// key that had the earliest idle time was used since).
func (s *Store) clean(shd *shard, d int64) int {
	if s.noEvict || d < shd.low || d < shd.calm {
		return 0
	}
	scanned := int64(shd.m.next) + int64(len(shd.leases))
	low := int64(math.MaxInt64)
	n := 0
	shd.m.scan(int(shd.m.next), func(e *entry) bool { // (every entry once)
		if e.idle <= d {
			n++
			return true
		}
		low = min(low, e.idle)
		return false
	})
	for k, sl := range shd.leases {
		if sl.prune(d); len(sl.ids) == 0 {
			delete(shd.leases, k)
			n++
			continue
		}
		low = min(low, slices.Max(sl.exp))
	}
	s.evictions.Add(uint64(n))
	s.scans.Add(1)
	shd.low, shd.calm = low, d+min(scanned*cleanCost, maxCalm)
	shd.wake.Store(max(shd.low, shd.calm))
	return n
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
	d, _ := s.now()
	for _, key := range lease.Keys {
		shd := &s.shards[s.shardOf(key)]
		shd.mu.Lock()
		if sl := shd.leases[key]; sl != nil {
			for i, id := range sl.ids {
				if id == lease.ID {
					last := len(sl.ids) - 1
					sl.ids[i], sl.exp[i] = sl.ids[last], sl.exp[last]
					sl.ids, sl.exp = sl.ids[:last], sl.exp[:last]
					// The set is idle sooner: when its last lease left
					// expires, or now.
					idle := d
					if last > 0 {
						idle = slices.Max(sl.exp)
					}
					shd.noteIdle(idle)
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
