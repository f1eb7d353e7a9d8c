// Adjust: corrections to items taken earlier.

package memstore

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

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
		op := a.Op()
		if op == 0 || op == '-' && wall >= a.RefundBefore {
			continue // nothing to do; or refilled, a new window: returning it would create credit
		}
		h := s.hash(a.Key)
		shd := &s.shards[shardOf(h)]
		credit := 0
		shd.mu.Lock()
		ok := s.adjust1(shd, h, a, d, wall, &credit)
		shd.mu.Unlock()
		if !ok {
			if credit = s.makeRoom(d, 1); credit > 0 || s.keys.Load() < s.maxKeys { // (holding no lock, as in take)
				shd.mu.Lock()
				ok = s.adjust1(shd, h, a, d, wall, &credit)
				shd.mu.Unlock()
				s.giveBack(credit)
			}
		}
		if !ok && err == nil {
			err = s.fullError(a.Key, s.keys.Load(), d)
		}
	}
	return err
}

// adjust1 applies a in its locked shard; false when it needs a new key and
// finds no room.
func (s *Store) adjust1(shd *shard, h uint64, a store.Adjustment, d, wall int64, credit *int) bool {
	e := shd.m.get(h, a.Key)
	exists := e != nil
	if !exists {
		if a.Op() == '-' {
			return true // nothing to return to
		}
		// The key was evicted (its state was new again): the charge
		// still counts, against a new state.
		if !s.room1(shd, d, true, credit) {
			return false
		}
		if e = shd.m.insert(h, a.Key, entry{}); e == nil { // (room1 saw room in the table)
			s.keys.Add(-1)
			return false
		}
	}
	if a.Base != nil || len(shd.specs) > 0 {
		if exists { // (converted to a.Spec, and kept so even when nothing changes)
			e.entry, _ = shd.asSpec(e, a.Spec, a.Base, e.entry, d, wall)
		} else {
			shd.wrote(e.key, a.Spec, a.Base)
		}
	}
	adjustEntry(a, &e.entry, exists, d, wall)
	shd.m.holdIdle(e) // (a block outlives any correction)
	if e.idle < shd.low {
		shd.noteIdle(e.idle) // (a refund makes a key idle sooner)
	}
	return true
}

// adjustEntry applies a to the key's state e (exists tells whether it
// had one) by the kind's rule.
func adjustEntry(a store.Adjustment, e *entry, exists bool, d, wall int64) {
	now := store.Now{Mono: d, Wall: wall}
	var st store.State
	var dec sluice.Decision
	var ok bool
	switch a.Op() {
	case 'p':
		st, dec, ok = a.Spec.Pause(e.st, exists, now, a.Pause)
	case 'l':
		st, dec, ok = a.Spec.Lower(e.st, exists, now, a.Delta)
	default:
		st, dec, ok = a.Spec.Adjust(e.st, exists, now, a.Delta)
	}
	if !ok {
		return
	}
	// The idle time exactly, as step sets it: a later take must not find
	// it earlier (see noteIdle).
	e.st, e.idle = st, idleAt(d, int64(dec.ResetAfter))
}
