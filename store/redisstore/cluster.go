// Redis Cluster: hash slots, and all-or-nothing over several slots (take, then undo).

package redisstore

import (
	"context"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/store"
)

// takeHashSlots is Take over several hash slots of a cluster: each hash
// slot's items are taken by its own script call (all at once), and if any
// refuses, what the others took is refunded.
func (s *Store) takeHashSlots(ctx context.Context, items []store.Item, groups [][]int, slotID string) (bool, error) {
	calls := make([]*call, len(groups))
	undo := ""
	if crossShares(items) {
		undo = newSlotID()
	}
	var wg sync.WaitGroup
	for g, idx := range groups {
		c := &call{slotID: slotID, undo: undo}
		for _, i := range idx {
			c.items = append(c.items, items[i])
		}
		calls[g] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, []*call{c})
		}()
	}
	wg.Wait()
	allowed := true
	var firstErr error
	okGroup := make([]bool, len(groups))
	for g, c := range calls {
		if c.ok {
			s.countFromAnswer(c.items, c)
		}
		for j, i := range groups[g] {
			items[i].Decision, items[i].RefundBefore, items[i].Wait = c.items[j].Decision, c.items[j].RefundBefore, c.items[j].Wait
		}
		switch {
		case c.err != nil:
			if firstErr == nil {
				firstErr = c.err
			}
		case c.ok:
			okGroup[g] = true
		default:
			allowed = false
		}
	}
	if firstErr != nil || !allowed {
		// Undo what the slots that admitted took (with a fresh deadline:
		// the refund matters even if the caller gave up).
		s.undo(items, groups, okGroup, slotID, undo)
		if firstErr == nil {
			s.peekAdmitted(ctx, items, groups, okGroup)
		}
	}
	return allowed, firstErr
}

// peekAdmitted replaces the decisions of the slots that admitted a request
// refused elsewhere (and were refunded) by their state as it is now, as a
// refusal on one slot reports it: one peek per such slot, in parallel. A
// slot whose peek fails reports what it took added back to its Remaining.
func (s *Store) peekAdmitted(ctx context.Context, items []store.Item, groups [][]int, ok []bool) {
	var wg sync.WaitGroup
	for g, idx := range groups {
		if !ok[g] {
			continue
		}
		c := &call{}
		for _, i := range idx {
			c.items = append(c.items, store.Item{Key: items[i].Key, Spec: items[i].Spec, Reserve: items[i].Reserve}) // (in the class's view)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, []*call{c})
			for j, i := range idx {
				it := &items[i]
				if c.err == nil {
					it.Decision = c.items[j].Decision
				} else if it.Spec.HoldsSlots() && it.Cost > 0 {
					it.Decision.Remaining++
				} else {
					it.Decision.Remaining += it.Cost
				}
				it.Decision.Allowed, it.Decision.RetryAfter = true, 0
			}
		}()
	}
	wg.Wait()
}

// groups splits item indexes by hash slot (one group on a single Redis).
func (s *Store) groups(items []store.Item) [][]int {
	if !s.cluster || len(items) == 1 {
		idx := make([]int, len(items))
		for i := range idx {
			idx[i] = i
		}
		return [][]int{idx}
	}
	var slots []uint16
	var groups [][]int
	for i, it := range items {
		sl := HashSlot(s.Key(it.Spec.Kind, it.Key))
		g := -1
		for j, x := range slots {
			if x == sl {
				g = j
				break
			}
		}
		if g < 0 {
			slots = append(slots, sl)
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// undo refunds the groups that admitted a request refused elsewhere (and
// puts back the virtual times their fair shares wrote under undo id
// undoShares, when not "").
func (s *Store) undo(items []store.Item, groups [][]int, ok []bool, slotID, undoShares string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	if undoShares != "" {
		s.undoShares(ctx, items, groups, ok, undoShares)
	}
	var adj []store.Adjustment
	var rel store.Slots
	for g, idx := range groups {
		if !ok[g] {
			continue
		}
		for _, i := range idx {
			switch it := items[i]; {
			case it.Cost == 0:
			case it.Spec.HoldsSlots():
				rel.Keys = append(rel.Keys, s.Key(it.Spec.Kind, it.Key))
			default:
				adj = append(adj, store.Adjustment{Key: it.Key, Spec: it.Spec, Delta: -it.Cost, RefundBefore: it.RefundBefore})
			}
		}
	}
	if len(rel.Keys) > 0 {
		rel.ID = slotID
		s.Release(ctx, rel)
	}
	if len(adj) > 0 {
		s.Adjust(ctx, adj)
	}
}

// HashSlot returns the Redis Cluster hash slot of key (CRC16 of its hash tag,
// the part between the first '{' and the next '}' when not empty).
func HashSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}

// Slot is the former name of HashSlot.
//
// Deprecated: use HashSlot.
func Slot(key string) uint16 { return HashSlot(key) }

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
