// In-flight slots (Concurrency items): taking, expiring and releasing them.

package memstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

type slotSet struct {
	ids []string
	exp []int64 // ns since t0
}

// takeSlot takes an in-flight slot for a Concurrency item (whose key the
// store may keep); it reports whether it created the key's slot set (a
// new key, which the caller has counted against the cap).
func (s *Store) takeSlot(shd *shard, it *store.Item, d int64, res *store.Result) bool {
	if it.Cost == 0 {
		return false
	}
	if res.Slots.ID == "" {
		res.Slots.ID = s.slotBase + strconv.FormatUint(s.slotSeq.Add(1), 36)
	}
	sl := shd.slotSets[it.Key]
	created := sl == nil
	if created {
		sl = &slotSet{}
		shd.slotSets[it.Key] = sl
	}
	exp := d + int64(it.Spec.SlotTTL)
	sl.ids = append(sl.ids, res.Slots.ID)
	sl.exp = append(sl.exp, exp)
	res.Slots.Keys = append(res.Slots.Keys, it.Key)
	if created && exp < shd.low { // (a set's idle time only grows with its slots)
		shd.noteIdle(exp)
	}
	return created
}

// peekSlots decides a Concurrency item without taking the slot; it returns
// the key's slot set too (nil: none).
func (s *Store) peekSlots(shd *shard, it store.Item, d int64) (sluice.Decision, *slotSet) {
	sl := shd.slotSets[it.Key]
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
	if it.Reserve != 0 { // a priority class: its reserve's slots are not its own
		max = it.Spec.ReservedSlots(it.Reserve)
	}
	dec := sluice.Decision{}
	take := int64(0)
	if it.Cost > 0 {
		take = 1
	}
	if live+take <= max {
		dec.Allowed = true
		dec.Remaining = max - live - take
		if take > 0 {
			if exp := d + int64(it.Spec.SlotTTL); exp > last { // (a renewed slot may expire later)
				last = exp
			}
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

func (sl *slotSet) prune(d int64) {
	j := 0
	for i := range sl.ids {
		if sl.exp[i] > d {
			sl.ids[j], sl.exp[j] = sl.ids[i], sl.exp[i]
			j++
		}
	}
	sl.ids, sl.exp = sl.ids[:j], sl.exp[:j]
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, slots store.Slots) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	d, _ := s.now()
	for _, key := range slots.Keys {
		shd := &s.shards[s.shardOf(key)]
		shd.mu.Lock()
		if sl := shd.slotSets[key]; sl != nil {
			for i, id := range sl.ids {
				if id == slots.ID {
					last := len(sl.ids) - 1
					sl.ids[i], sl.exp[i] = sl.ids[last], sl.exp[last]
					sl.ids, sl.exp = sl.ids[:last], sl.exp[:last]
					// The set is idle sooner: when its last slot left
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

// Renew implements store.Renewer.
func (s *Store) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if ttl <= 0 {
		return fmt.Errorf("memstore: renew: ttl %v must be positive: %w", ttl, store.ErrInvalidItem)
	}
	d, _ := s.now()
	exp := d + int64(ttl)
	for _, key := range slots.Keys {
		shd := &s.shards[s.shardOf(key)]
		shd.mu.Lock()
		if sl := shd.slotSets[key]; sl != nil {
			for i, id := range sl.ids {
				if id == slots.ID && sl.exp[i] > d {
					// (a later expiry makes the set idle later, never
					// sooner: the shard's low mark stays a lower bound)
					sl.exp[i] = max(sl.exp[i], exp)
					break
				}
			}
		}
		shd.mu.Unlock()
	}
	return nil
}
