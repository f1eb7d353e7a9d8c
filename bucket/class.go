// Reservations of a priority class: Reserve and ReserveAt on the view of
// a class whose reserve cuts the capacity (Params.Reserved),
// docs/behaviour.md section 7.

package bucket

import (
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// ReserveClass is Reserve for a request of a priority class whose reserve
// is ppm parts per million of the capacity (0 <= ppm < ReserveScale): the
// cost is booked only if the new theoretical arrival time is at most
// now + (1 − reserve)·τ + maxWait (τ the time to refill the capacity), and
// the reservation's tokens are there once the booking is within the
// class's view of the bucket (Params.Reserved), so a class with a reserve
// is admitted later than a class without one at the same place in the
// line. Every class decides on the same state, so the total admitted over
// any interval t stays within Capacity + Rate·t. ppm 0 is Reserve.
func (b *Bucket) ReserveClass(cost int64, maxWait time.Duration, ppm uint32) (*Reservation, error) {
	return b.reserveClass(b.now(), cost, maxWait, ppm)
}

// ReserveClassAt is ReserveClass at time now (see AllowAt).
func (b *Bucket) ReserveClassAt(now time.Time, cost int64, maxWait time.Duration, ppm uint32) (*Reservation, error) {
	return b.reserveClass(b.at(now), cost, maxWait, ppm)
}

func (b *Bucket) reserveClass(d, cost int64, maxWait time.Duration, ppm uint32) (*Reservation, error) {
	if ppm == 0 {
		return b.reserve(d, cost, maxWait)
	}
	for {
		ep, at, tat := b.snapshot(d)
		if ep == nil {
			return nil, errNotMade
		}
		if cost < 0 || cost > ep.p.limit.Capacity {
			return nil, costError(cost, ep.p.limit.Capacity)
		}
		if cost > 0 && ep.p.inexactRestart(tat, at) {
			b.reanchor(ep, tat, at)
			continue
		}
		view := ep.p.Reserved(ppm)
		nt, wait, ok := view.Reserve(tat, at, cost, max(maxWait, 0))
		if !ok {
			return nil, sluice.Errorf(sluice.ErrWaitTooLong, "cost %d would wait %v within its class's share, more than the maximum %v", cost, wait, max(maxWait, 0))
		}
		if ep.tat.CompareAndSwap(tat, nt) {
			refund := int64(math.MaxInt64)
			if n, ok := ep.p.Nanos(nt, ep.phase); ok && n <= math.MaxInt64-ep.origin {
				refund = ep.origin + n
			}
			return &Reservation{b: b, cost: cost, act: d + int64(wait), refund: refund}, nil
		}
	}
}
