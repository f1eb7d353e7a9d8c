// Priority-class reserves on a token bucket: a class's view of the
// capacity (Reserved) and its admission (StepReserved), docs/behaviour.md
// "Priority classes".

package bucket

import (
	"math/bits"

	"github.com/sluicehq/sluice"
)

// ReserveScale is the denominator of a class's reserve: a reserve is
// given in parts per million of the capacity (0.2 is 200000).
const ReserveScale = 1_000_000

// Reserved returns p as a class whose reserve is ppm parts per million
// (0 <= ppm < ReserveScale) sees it: the same state, clock and rate, with
// the capacity in units cut to floor(CapacityUnits·(ReserveScale−ppm) /
// ReserveScale), exactly. Deciding with it (StepReserved, Reserve) admits
// or books a cost only if the new theoretical arrival time is at most
// now + (1 − reserve)·τ (+ the wait allowed), τ being the time to refill
// the whole capacity. Reserved(0) is p.
func (p *Params) Reserved(ppm uint32) Params {
	q := *p
	if ppm == 0 {
		return q
	}
	if ppm >= ReserveScale {
		q.capUnits = 0
		return q
	}
	hi, lo := bits.Mul64(uint64(p.capUnits), uint64(ReserveScale-ppm))
	c, _ := bits.Div64(hi, lo, ReserveScale)
	q.capUnits = int64(c)
	return q
}

// StepReserved is Step on a Reserved view: as Step, except that a full
// bucket admits only a cost within the view's capacity (Step admits any
// cost up to the capacity from a full bucket, which the view's may be
// below). On p itself (Reserved(0)) it is Step.
func (p *Params) StepReserved(tat int64, t Instant, cost int64) (int64, sluice.Decision) {
	if cost*p.unit <= p.capUnits {
		return p.Step(tat, t, cost)
	}
	// More than the class may ever hold now: refused, reported as Step
	// reports a refusal.
	v, base, _ := p.base(tat, t)
	nt := base + cost*p.unit
	retry, reset := p.waits(nt-p.capUnits, base, t)
	return tat, sluice.Decision{
		Remaining:  p.whole(max(p.capUnits-(base-v), 0)),
		RetryAfter: retry,
		ResetAfter: reset,
	}
}
