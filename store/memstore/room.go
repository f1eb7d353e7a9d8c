// Room for keys: the cap, eviction of idle keys and the store-full error.

package memstore

import (
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/store"
)

// errNoRoom is take1's report that a new key found no room in the cap nor
// in the shard it holds locked.
var errNoRoom = errors.New("memstore: no room")

// noRoom goes with errNoRoom: the item whose new key found no room, and
// the keys held then.
type noRoom struct {
	item int
	keys int64
	need int // the new keys the request still needs room for
}

// room is a request's account of the keys it counts against the cap.
type room struct {
	held    int  // keys counted for the request's new keys
	made    bool // it evicted keys (an earlier item's entry may be gone)
	cleaned bool // it cleaned the shards it holds
}

// retry makes room for a request whose new keys (the first, item nr.item)
// found none at time d, in every shard, holding no lock but the one being
// cleaned (so that it cannot deadlock with take's ordered locking): idle
// keys first, else (unless WithRefuseWhenFull) keys the CLOCK hand picks
// (makeRoom). It then decides the request again (nothing was taken); a
// FullError when there is still no room or this was the last attempt.
func (s *Store) retry(items []store.Item, borrowed bool, attempt int, nr noRoom, d int64) (store.Result, error) {
	for ; attempt < maxAttempts; attempt++ {
		if credit := s.makeRoom(d, nr.need); credit > 0 || s.keys.Load() < s.maxKeys {
			return s.take(items, borrowed, attempt+1, credit, nil)
		}
		if s.refuseFull || s.noEvict || !s.holdsTableKeys() {
			break // (no room to make)
		}
	}
	if borrowed {
		ownKeys(items)
	}
	return store.Result{}, s.fullError(items[nr.item].Key, nr.keys, d)
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
			if s.shards[itemShard[j]].slotSets[it.Key] == nil {
				need++
			}
		} else if e := ents[j]; e == nil || e.key != it.Key {
			need++
			inTables++
		}
	}
	return need, inTables
}

// room1 counts one new key for locked shard shd (a bucket or window when
// inTable) against the cap — one of credit's, else the cap's free room —
// evicting the shard's idle keys if there is no room; false (nothing
// counted) when there is none.
func (s *Store) room1(shd *shard, d int64, inTable bool, credit *int) bool {
	if !inTable || shd.m.n < maxEntries {
		if *credit > 0 {
			*credit--
			return true
		}
		if s.reserve(1) == 1 {
			return true
		}
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
// (a new key, an adjustment, a released slot), so that low stays a lower
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
	if !s.noEvict && !s.refuseFull && s.holdsTableKeys() {
		// A key with state can make room at once: the request
		// lost the room made for it to others, or its shard's table is at
		// its limit.
		after = 1
	}
	return &store.FullError{Keys: keys, Cap: s.maxKeys, Key: strings.Clone(key), RetryAfter: after}
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

// makeRoom makes room for need new keys at time d: it counts the cap's
// free room for the caller, then cleans every shard that may hold a key
// idle at d, then, unless WithRefuseWhenFull, evicts keys by the CLOCK
// hand (evictLRU) until need fit. It returns the keys it counted and
// evicted for the caller, at most need, counted against the cap (the
// caller's credit: its new keys take them, so that other requests cannot
// take the room first — free room included: else a request whose room
// was partly free could lose that part to others at every attempt).
// It locks one shard at a time and is called holding none (so it cannot
// deadlock with take's ordered locking, nor make it wait long). A shard
// whose wake time is after d holds no idle key and costs one atomic read.
func (s *Store) makeRoom(d int64, need int) int {
	got := s.reserve(need)
	if got < need {
		got += s.cleanAll(d, need-got)
	}
	for got < need && !s.refuseFull && !s.noEvict {
		n := s.evictLRU(d)
		if n == 0 {
			break
		}
		kept := min(n, need-got)
		s.giveBack(n - kept)
		got += kept
	}
	return got
}

// giveBack releases n keys counted against the cap and not used.
func (s *Store) giveBack(n int) {
	if n > 0 {
		s.keys.Add(-int64(n))
	}
}

// cleanAll cleans every shard that may hold a key idle at d (see makeRoom)
// and returns how many keys it evicted, at most keep, whose counts it
// leaves for the caller (it gives back the others).
func (s *Store) cleanAll(d int64, keep int) int {
	got := 0
	for i := range s.shards {
		shd := &s.shards[i]
		if d < shd.wake.Load() {
			continue
		}
		shd.mu.Lock()
		n := s.clean(shd, d)
		shd.mu.Unlock()
		kept := min(n, keep-got)
		s.giveBack(n - kept)
		got += kept
	}
	return got
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
	scanned := int64(shd.m.next) + int64(len(shd.slotSets))
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
	for k, sl := range shd.slotSets {
		if sl.prune(d); len(sl.ids) == 0 {
			delete(shd.slotSets, k)
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
	for k, sl := range shd.slotSets {
		if n++; n > budget {
			break
		}
		if sl.prune(d); len(sl.ids) == 0 {
			delete(shd.slotSets, k)
			s.keys.Add(-1)
			s.evictions.Add(1)
		}
	}
}
