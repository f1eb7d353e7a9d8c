// The fast path of a decision on token buckets the store already holds
// (TakeHeldAt): no key created, evicted or converted, no booking.

package memstore

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// maxHeld is the most items TakeHeldAt decides (its arrays are on the
// stack).
const maxHeld = 8

// TakeHeldAt names its shards by the bits of one uint64.
var _ [64 - shardCount]struct{}

// TakeHeldAt is TakeBorrowedAt (at nil: the store's clock) for a request
// whose every item is a plain token bucket — Spec.Kind TokenBucket, no
// BlockFor nor FairShare, no Base, no MaxWait, no Reserve, a valid cost (0 to the
// capacity), keys distinct — on a key the store holds, when no key of
// the shards involved is kept under another spec than its usual one
// (respec.go): then it decides exactly as TakeBorrowedAt, in the same
// order of locks, and returns ok and whether the request was admitted
// (TakeBorrowedAt's Result.Allowed: such a request holds no slot and
// waits for nothing). Every item's Decision and Wait are set,
// and its Key becomes the store's copy; RefundBefore is not set (callers
// that settle use TakeBorrowedAt). Otherwise (a new key, a closed store,
// more than 8 items, an item of another shape) it returns false having
// changed nothing in the store but the use marks of the keys it found
// (which TakeBorrowedAt sets again; some items' Decision and Wait may be
// written, and TakeBorrowedAt writes them all): the caller then calls
// TakeBorrowedAt.
func (s *Store) TakeHeldAt(items []store.Item, at *time.Time) (allowed, ok bool) {
	for i := range items {
		if it := &items[i]; !HeldSpec(it.Spec) || it.Base != nil || it.MaxWait > 0 || it.Reserve != 0 {
			return false, false
		}
	}
	return s.TakePlainHeldAt(items, at)
}

// HeldSpec reports whether TakeHeldAt decides items of spec sp: a plain
// token bucket (no BlockFor nor FairShare).
func HeldSpec(sp *store.Spec) bool {
	return sp.Kind.Direct() && sp.BlockFor == 0 && sp.FairShare == nil
}

// TakePlainHeldAt is TakeHeldAt for items whose shape its caller
// guarantees (each one's spec HeldSpec, no Base, MaxWait or Reserve, a
// valid cost, keys distinct), checked once for all its requests (the
// limiter's fast plan): the shapes are not checked again.
func (s *Store) TakePlainHeldAt(items []store.Item, at *time.Time) (allowed, ok bool) {
	if s.closed.Load() {
		return false, false
	}
	var d int64 // (a token bucket decides on the monotonic time alone)
	if at != nil && s.clock == nil {
		d = int64(at.Sub(s.t0))
	} else {
		d, _ = s.now()
	}
	n := len(items)
	if n == 1 { // (as take1 decides it; written here: a call fewer)
		it := &items[0]
		h := s.hash(it.Key)
		shd := &s.shards[shardOf(h)]
		shd.mu.Lock()
		if len(shd.specs) > 0 {
			shd.mu.Unlock()
			return false, false
		}
		e := shd.m.get(h, it.Key)
		if e == nil {
			shd.mu.Unlock()
			return false, false
		}
		tat, origin, phase := stepHeld(&it.Spec.Bucket, &e.st, d, it.Cost, &it.Decision)
		it.Wait, it.Key = 0, e.key
		allowed = it.Decision.Allowed
		if allowed {
			e.st, e.idle = store.State{tat, origin, phase}, idleAt(d, int64(it.Decision.ResetAfter))
			shd.m.holdIdle(e)
		}
		s.sweep(shd, d)
		shd.mu.Unlock()
		return allowed, true
	}
	if n == 0 || n > maxHeld {
		return false, false
	}
	var hashes [maxHeld]uint64
	var ents [maxHeld]*tentry
	var next [maxHeld]store.State
	var shards uint64 // the shards involved, a bit each (shardCount is 64): locked in ascending order
	for i := range items {
		h := s.hash(items[i].Key)
		hashes[i] = h
		shards |= 1 << shardOf(h)
	}
	for m := shards; m != 0; m &= m - 1 {
		shd := &s.shards[bits.TrailingZeros64(m)]
		shd.mu.Lock()
		if len(shd.specs) > 0 {
			s.unlockShards(shards &^ (m & (m - 1))) // (those locked so far)
			return false, false
		}
	}
	allowed = true
	for i := range items { // (a step changes no entry: a key missing after it leaves the store as it was)
		it := &items[i]
		e := s.shards[shardOf(hashes[i])].m.get(hashes[i], it.Key)
		if e == nil {
			s.unlockShards(shards)
			return false, false
		}
		ents[i] = e
		next[i][0], next[i][1], next[i][2] = stepHeld(&it.Spec.Bucket, &e.st, d, it.Cost, &it.Decision)
		it.Wait = 0
		allowed = allowed && it.Decision.Allowed
	}
	if !allowed {
		// As refuseMany: nothing taken; an item that alone would admit
		// reports its state as it is.
		for i := range items {
			it := &items[i]
			if it.Decision.Allowed && it.Cost > 0 {
				next[i][0], next[i][1], next[i][2] = stepHeld(&it.Spec.Bucket, &ents[i].st, d, 0, &it.Decision)
				it.Decision.Allowed, it.Decision.RetryAfter = true, 0
			}
			it.Key = ents[i].key
		}
		s.unlockShards(shards)
		return false, true
	}
	for i := range items { // as commitMany
		e := ents[i]
		e.st, e.idle = next[i], idleAt(d, int64(items[i].Decision.ResetAfter))
		s.shards[shardOf(hashes[i])].m.holdIdle(e)
		items[i].Key = e.key
	}
	for m := shards; m != 0; m &= m - 1 { // (each shard swept, then unlocked)
		shd := &s.shards[bits.TrailingZeros64(m)]
		s.sweep(shd, d)
		shd.mu.Unlock()
	}
	return true, true
}

// unlockShards unlocks the shards of the bits set in shards.
func (s *Store) unlockShards(shards uint64) {
	for m := shards; m != 0; m &= m - 1 {
		s.shards[bits.TrailingZeros64(m)].mu.Unlock()
	}
}

// stepHeld is Spec.Step for a token bucket's existing state *st, as
// store.stepBucket decides it (written out: a State holds a bucket's TAT,
// origin and phase; store.BucketState's rebasing only when d is before
// the origin or more than MaxElapsed after it): it writes the decision
// into *dec and returns the next state (its three words: in registers).
func stepHeld(p *bucket.Params, st *store.State, d, cost int64, dec *sluice.Decision) (tat1, origin1, phase1 int64) {
	tat, origin, phase := st[0], st[1], uint64(st[2])
	if uint64(d-origin) > uint64(p.MaxElapsed()) {
		tat, origin, phase = store.BucketState(p, tat, origin, phase, true, d)
	} else if tat <= p.Units(bucket.Instant{Elapsed: d - origin, Phase: phase}) {
		tat, origin, phase = 0, d, 0 // full: the same as new (BucketState)
	}
	nt, dc := p.Step(tat, bucket.Instant{Elapsed: d - origin, Phase: phase}, cost)
	*dec = dc
	return nt, origin, int64(phase)
}
