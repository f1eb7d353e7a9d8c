// Eviction at the cap when no key is idle: a CLOCK (second chance) hand
// over every shard's buckets and windows, an approximation of least
// recently used that costs a bit a key.

package memstore

import (
	"math"
	"sync/atomic"
)

// WithRefuseWhenFull makes the store keep every key that has state at the
// cap: a request needing a new key when no key is idle is refused with a
// *store.FullError, as before eviction of keys in use (see the package
// documentation). A flood of new keys then locks new keys out until the
// flood's keys are idle again, which may take a window's length.
func WithRefuseWhenFull() Option { return func(s *Store) { s.refuseFull = true } }

// clockHand is the store's CLOCK hand: which shard it is in (the low 6
// bits) and how many times it went round (the rest); each shard keeps
// where in its table the hand is (table.hand) and the last lap the hand
// finished in it (shard.lap), so that an evictor holding a stale hand
// does not pass a shard twice in one lap.
type clockHand = atomic.Uint64

// evictLRU makes room for one new key at time d by moving the CLOCK hand
// until it evicts a bucket or window: the hand passes the entries of
// shard 0 in index order, then shard 1's, and so on to shard 63's and
// round again. A key it passes has its use mark cleared when set (it was
// used since the hand last passed it; a new key starts unmarked), else it
// is evicted:
// an idle eviction when it is idle at d (makeRoom evicted the idle keys
// it could find first), else an LRU one (it had state, which its next
// request starts without). So a key used since the hand last passed it
// is not evicted before the hand has passed every other key held once
// more. Slot sets are never passed
// (never evicted with live slots). It locks one shard at a time, called
// holding none, and returns how many keys it evicted (1, its count left
// in s.keys for the caller); 0 when two laps found no bucket or window.
func (s *Store) evictLRU(d int64) int {
	empty := 0 // shards passed without an eviction
	for empty <= 2*shardCount+1 {
		h := s.hand.Load()
		lap, shd := h/shardCount, &s.shards[h%shardCount]
		shd.mu.Lock()
		if shd.lap > lap { // another evictor finished this shard's lap: reload
			shd.mu.Unlock()
			continue
		}
		key, withState, ok := s.passShard(shd, d)
		if !ok {
			shd.lap = lap + 1
			s.hand.CompareAndSwap(h, h+1)
		}
		shd.mu.Unlock()
		if !ok {
			empty++
			continue
		}
		if withState {
			s.lruEvicted.Add(1)
			if s.onLRU != nil {
				s.onLRU(key, d)
			}
		}
		return 1
	}
	return 0
}

// passShard moves the hand through locked shard shd from where it is, as
// evictLRU says, and returns the key it evicted and whether that key had
// state at d; ok false when the hand reached the shard's end (it then
// stands at the shard's start for the next lap). It reads no marked
// entry (but for OnPass): 64 marked entries in a row cost one word's test.
func (s *Store) passShard(shd *shard, d int64) (key string, withState, ok bool) {
	t := &shd.m
	for t.hand < t.next {
		i := t.hand
		if w := &t.marks[i>>6]; i&63 == 0 && *w == math.MaxUint64 {
			*w = 0 // 64 keys used since the hand last passed them
			t.hand += 64
			if s.onPass != nil {
				for j := range uint32(64) {
					s.onPass(t.at(i + j).key)
				}
			}
			continue
		}
		t.hand++
		if t.unmark(i) {
			if s.onPass != nil {
				s.onPass(t.at(i).key)
			}
			continue // used since the hand last passed it: a second chance
		}
		te := t.at(i)
		if te.key == "" {
			continue
		}
		key, withState = te.key, te.idle > d
		t.remove(t.hash(key), i)
		s.evictions.Add(1)
		return key, withState, true
	}
	t.hand = 0
	return "", false, false
}

// holdsTableKeys reports whether any shard holds a bucket or window (one
// evictLRU can evict). It locks one shard at a time.
func (s *Store) holdsTableKeys() bool {
	for i := range s.shards {
		shd := &s.shards[i]
		shd.mu.Lock()
		n := shd.m.n
		shd.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// EvictionsByReason returns the evictions so far by reason: idle (keys
// whose state was a new key's again: no decision changes) and lru (keys
// with state evicted by the CLOCK hand to make room for a new key at the
// cap: see evictLRU for the order). Their sum is Stats().Evictions.
func (s *Store) EvictionsByReason() (idle, lru uint64) {
	all, l := s.evictions.Load(), s.lruEvicted.Load()
	return all - min(l, all), l
}
