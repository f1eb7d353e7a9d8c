// Priority classes in the kind table: a class's reserve applied to each
// kind's limit (StepReserved, BookReserved, ReservedSlots) and the most
// one request of a class may cost (ClassCapacity), the same in every store (docs/behaviour.md "Priority classes").

package store

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// ReserveScale is the denominator of Item.Reserve: parts per million.
const ReserveScale = bucket.ReserveScale

// Reserved is n less a reserve of ppm parts per million, rounded down:
// floor(n·(ReserveScale−ppm)/ReserveScale), exactly (n >= 0; ppm at or
// above ReserveScale leaves 0).
func Reserved(n int64, ppm uint32) int64 {
	if ppm == 0 || n <= 0 {
		return n
	}
	if ppm >= ReserveScale {
		return 0
	}
	hi, lo := bits.Mul64(uint64(n), uint64(ReserveScale-ppm))
	q, _ := bits.Div64(hi, lo, ReserveScale)
	return int64(q)
}

// ReservedSlots is the in-flight slots a class with reserve ppm may fill
// of a Concurrency spec's MaxInFlight (Reserved of it).
func (s *Spec) ReservedSlots(ppm uint32) int64 { return Reserved(s.MaxInFlight, ppm) }

// ClassCapacity is the largest cost one request of a class with reserve
// ppm may ever be admitted for on s (ppm 0: Capacity): the whole tokens
// of a token bucket's Reserved capacity in its fixed-point units
// (floor(floor(B·Unit·(10^6−ppm)/10^6)/Unit)), the limit of a window or
// a quota cut by the reserve (Reserved), the slots of an in-flight cap the
// class may fill (ReservedSlots). A cost above it never is, not even from
// a full bucket or an empty window: Validate refuses it, as a cost above
// the capacity, with sluice.ErrCostExceedsCapacity (an in-flight cap's
// item needs one slot for any cost above 0).
func (s *Spec) ClassCapacity(ppm uint32) int64 {
	if ppm == 0 {
		return s.Capacity()
	}
	if s.Kind == TokenBucket {
		b := s.Bucket.Reserved(ppm)
		return b.CapacityUnits() / b.Unit()
	}
	return Reserved(s.Capacity(), ppm)
}

// classCost is the part of its class's capacity (ClassCapacity) item it
// needs: its cost, or one slot of an in-flight cap for a cost above 0.
func (it *Item) classCost() int64 {
	if it.Spec.HoldsSlots() {
		return min(it.Cost, 1)
	}
	return it.Cost
}

// classCostError is the error Validate returns for an item of a priority
// class whose cost is above what the class may ever take (ClassCapacity):
// nil for an item of no class or within it.
func (it *Item) classCostError() error {
	if it.Reserve == 0 || it.Cost <= 0 {
		return nil
	}
	if c, n := it.classCost(), it.Spec.ClassCapacity(it.Reserve); c > n {
		return sluice.Errorf(sluice.ErrCostExceedsCapacity, "cost %d exceeds capacity %d, the class's view of capacity %d (a reserve of %d ppm)", c, n, it.Spec.Capacity(), it.Reserve)
	}
	return nil
}

// reservedView is s as a class with reserve ppm > 0 sees it: a token
// bucket's capacity in units, a window's or a quota's limit and an
// in-flight cap cut by the reserve (Reserved); the state means the same.
func (s *Spec) reservedView(ppm uint32) Spec {
	c := *s
	c.Bucket = s.Bucket.Reserved(ppm)
	c.Window.Limit = Reserved(s.Window.Limit, ppm)
	c.Quota.Limit = Reserved(s.Quota.Limit, ppm)
	c.MaxInFlight = Reserved(s.MaxInFlight, ppm)
	return c
}

// StepReserved is Step for an item of a priority class whose reserve is
// ppm parts per million (Item.Reserve): a token bucket admits cost only
// if its new theoretical arrival time is at most now + (1 − reserve)·τ
// (τ the time to refill the capacity), a window or a quota only if its
// count stays within its limit cut by the reserve. The decision's
// Remaining is the class's (what it may still take). ppm 0 is Step.
func (s *Spec) StepReserved(st State, exists bool, now Now, cost int64, ppm uint32) (State, sluice.Decision) {
	if ppm == 0 {
		return s.Step(st, exists, now, cost)
	}
	v := s.reservedView(ppm)
	if s.Kind == TokenBucket {
		p := &v.Bucket
		t, o, ph := st.tat()
		tat, origin, phase := BucketState(p, t, o, ph, exists, now.Mono)
		nt, dec := p.StepReserved(tat, bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}, cost)
		return bucketState(nt, origin, phase), dec
	}
	if cost > v.Capacity() {
		// More than the class may ever count in a window or period:
		// refused, with its state as it is; retry when the count is gone.
		_, dec := v.stepOther(st, exists, now, 0)
		dec.Allowed, dec.RetryAfter = false, dec.ResetAfter
		return st, dec
	}
	return v.stepOther(st, exists, now, cost)
}

// BookReserved is Book for an item of a priority class (see StepReserved):
// a token bucket books cost only if its new theoretical arrival time is
// at most now + (1 − reserve)·τ + maxWait (the caller has cut maxWait to
// the class's max_queue_ms). ppm 0 is Book.
func (s *Spec) BookReserved(st State, exists bool, now Now, cost int64, maxWait time.Duration, ppm uint32) (out State, dec sluice.Decision, wait time.Duration) {
	if ppm == 0 {
		return s.Book(st, exists, now, cost, maxWait)
	}
	v := s.reservedView(ppm)
	if b, ok := kinds[s.Kind].alg.(booker); ok && maxWait > 0 {
		if out, dec, wait, ok = b.book(&v, st, exists, now, cost, maxWait); ok {
			return out, dec, wait
		}
	}
	out, dec = s.StepReserved(st, exists, now, cost, ppm)
	return out, dec, 0
}
