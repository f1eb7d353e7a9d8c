// Params: a Limit compiled to exact integer arithmetic over a bucket's state (its representation, below), and the transitions on it.

package bucket

import (
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
)

// Representation.
//
// A bucket's state is one int64, its theoretical arrival time (TAT) in the
// sense of GCRA, measured in fixed-point token units: 1 token = Unit units.
// Time enters only through the virtual token clock
//
//	V(d) = floor((d * Num + Phase) / Den)
//
// where d is nanoseconds since the state's origin and Num/Den is the rate in
// units per nanosecond, an exact ratio of integers. The bucket holds
// Capacity - max(0, TAT - V) tokens. Because V is a floor of an exact
// function of absolute time (never a sum of rounded increments), rounding
// cannot accumulate: credit is never created.
//
// The scale is chosen per limit, from the exact rate (see Limit.RatePer):
//
//   - Whole units per nanosecond (Den = 1) whenever the rate is a fraction
//     a/b tokens per nanosecond with Capacity*b <= 2^61 and a <= 2^60/1e9:
//     one token is b units and V(d) = d*a is exact at every nanosecond, so
//     no decision rounds anything. Every "N per second, minute, hour, day"
//     and every Every(d) of a practical size compiles this way (100/minute:
//     a token is 6e8 units, one unit a nanosecond).
//   - Otherwise one token is 2^k units, k <= 32 the largest that keeps the
//     capacity within 2^59 units and V's growth within 2^54 units a second,
//     and Num/Den is the rate times 2^k / 1e9, reduced. V then has a
//     fraction of a unit at most instants: a decision reads V rounded down
//     and a full bucket restarts from V rounded up, so every rounding is
//     against the caller by less than one unit (2^-k tokens) and none
//     accumulates.
//
// V stays below 2^60 for at least MaxElapsed (1 s at the fastest, 64 s in
// the second form); past that the owner of the state rebases it to a new
// origin (Rebase), which is exact because the origin keeps the clock's
// phase. States never exceed MaxState, so every intermediate sum fits an
// int64.

const (
	maxShift          = 32
	maxCapUnits       = 1 << 59
	maxIntCapUnits    = 1 << 61
	maxV              = 1 << 60
	maxUnitsPerSecond = 1 << 54
	// maxIntUnitsPerNs keeps MaxElapsed >= 1 s with whole units per ns.
	maxIntUnitsPerNs = maxV / 1_000_000_000
	// MaxState is the largest TAT a state may hold (capacity plus the debt
	// of reservations, in units, above V).
	MaxState = 1 << 62
	// MaxAhead is how far a state may run ahead of the virtual clock, in
	// units (the capacity plus the debt of reservations and charges): a
	// bound relative to V, so that it is the same whatever the state's
	// origin and rebasing changes no decision. V < 2^60 keeps states
	// within MaxState.
	MaxAhead = 1 << 61
	// maxFill bounds the time to refill a full bucket (about 36 years).
	maxFill = 1 << 60
)

// Params is a Limit compiled to the exact fixed-point representation. The
// state transition functions on it are pure: they take a state and return a
// new one, so the in-process Bucket, the keyed stores, the Redis script and
// token leasing all make identical decisions. Params is immutable.
type Params struct {
	limit    Limit
	unit     int64 // units per token
	shift    uint  // log2(unit) when unit is a power of two
	capUnits int64
	num, den uint64
	exact    bool
	maxElap  int64
	byDen    divisor // fast division by den
	byNum    divisor // fast division by num
	byUnit   div63   // fast division by unit (of states, below 2^63)
	// whole1 is set when den is 1 and num below 2^62 (every "N per
	// period" rate of a practical size): V is then d*num, and a wait a
	// 63-bit division by num (byNum63), without divisor's 128-bit steps.
	whole1  bool
	byNum63 div63 // fast division by num, when whole1
}

// Limit returns the limit p was compiled from.
func (p *Params) Limit() Limit { return p.limit }

// Unit returns the units of state per token.
func (p *Params) Unit() int64 { return p.unit }

// Shift returns k when one token is 2^k units (Unit is a power of two),
// else 0.
func (p *Params) Shift() uint { return p.shift }

// Ratio returns the rate as units per nanosecond, Num/Den, and whether it is
// exactly the limit's rate (false only for float rates whose exact ratio
// does not fit 62-bit integers; they are rounded down by less than 1e-12).
// Den is 1 when every nanosecond adds a whole number of units.
func (p *Params) Ratio() (num, den uint64, exact bool) { return p.num, p.den, p.exact }

// CapacityUnits returns the capacity in units (Capacity * Unit).
func (p *Params) CapacityUnits() int64 { return p.capUnits }

// MaxElapsed is the largest elapsed time (ns since the state's origin) that
// the functions accept; beyond it the state must be rebased.
func (p *Params) MaxElapsed() int64 { return p.maxElap }

// Initial returns the state of a new bucket: full, or empty when empty is set.
func (p *Params) Initial(empty bool) int64 {
	if empty {
		return p.capUnits
	}
	return 0
}

// Instant locates a moment for the pure functions: Elapsed ns after the
// state's origin, where the virtual clock had already run Phase/Den of a
// unit at the origin (Phase is 0 for an origin that was never rebased).
// Elapsed must be in [0, MaxElapsed]; larger values are clamped, smaller
// count as 0.
type Instant struct {
	Elapsed int64
	Phase   uint64
}

// At returns the Instant d ns after a fresh origin.
func At(d int64) Instant { return Instant{Elapsed: d} }

// Units returns V = floor((Elapsed*Num + Phase) / Den), the virtual token
// clock at t.
func (p *Params) Units(t Instant) int64 {
	v, _ := p.units(t)
	return v
}

// units returns floor(V(t)) and whether V(t) has a fractional part.
func (p *Params) units(t Instant) (int64, bool) {
	d := min(max(t.Elapsed, 0), p.maxElap)
	if p.whole1 { // (what byDen.div gives for den 1: the product's low word)
		return int64(uint64(d)*p.num + t.Phase), false
	}
	hi, lo := bits.Mul64(uint64(d), p.num)
	var c uint64
	lo, c = bits.Add64(lo, t.Phase, 0)
	q, r := p.byDen.div(hi+c, lo)
	return int64(q), r != 0
}

// base returns the point from which a new booking at t counts: tat itself
// while the bucket is not full, else V(t) rounded up (a full bucket's
// fraction of a unit is dropped, so rounding can never create credit), and
// whether the bucket is full.
func (p *Params) base(tat int64, t Instant) (v, base int64, full bool) {
	v, frac := p.units(t)
	if tat > v {
		return v, tat, false
	}
	if frac {
		return v, v + 1, true
	}
	return v, v, true
}

// inexactRestart reports whether state tat is full at t while the virtual
// clock has a fractional part there (see step).
func (p *Params) inexactRestart(tat int64, t Instant) bool {
	v, frac := p.units(t)
	return frac && tat <= v
}

// Nanos returns the least elapsed time d (from the origin of t, with t's
// phase) at which V >= v, and false when that does not fit an int64.
func (p *Params) Nanos(v int64, phase uint64) (int64, bool) {
	if v <= 0 {
		return 0, true
	}
	hi, lo := bits.Mul64(uint64(v), p.den)
	var b uint64
	lo, b = bits.Sub64(lo, phase, 0)
	hi -= b
	if hi >= p.num {
		return 0, false
	}
	q, r := p.byNum.div(hi, lo)
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}

// wait returns the time from t until V >= target (0 if already): Nanos
// minus t.Elapsed, written out because it is on every decision's path.
func (p *Params) wait(target int64, t Instant) time.Duration {
	if target <= 0 {
		return 0
	}
	if p.whole1 && t.Phase == 0 {
		return time.Duration(max(p.ceilNum(uint64(target))-t.Elapsed, 0))
	}
	hi, lo := bits.Mul64(uint64(target), p.den)
	var b uint64
	lo, b = bits.Sub64(lo, t.Phase, 0)
	hi -= b
	if hi >= p.num {
		return time.Duration(math.MaxInt64)
	}
	q, r := p.byNum.div(hi, lo)
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	if int64(q) <= t.Elapsed {
		return 0
	}
	return time.Duration(int64(q) - t.Elapsed)
}

// Tokens returns the tokens held by state tat at t, in units (negative while
// in debt to reservations). It is at most CapacityUnits.
func (p *Params) Tokens(tat int64, t Instant) int64 {
	v := p.Units(t)
	if tat <= v {
		return p.capUnits
	}
	return p.capUnits - (tat - v)
}

// Step is the token-bucket transition for an admission that takes cost now
// or not at all: given state tat at t, it returns the new state and the
// decision. A refused request leaves the state unchanged, and so does cost 0
// (a peek). The caller must have checked 0 <= cost <= Capacity.
//
// Tokens are read with V rounded down and a full bucket restarts from V
// rounded up, so every rounding is against the caller and none accumulates.
func (p *Params) Step(tat int64, t Instant, cost int64) (int64, sluice.Decision) {
	nt, dec, _ := p.step(tat, t, cost, false)
	return nt, dec
}

// step is Step, except that with reanchor set it decides nothing and
// returns true when a cost would restart a full bucket at a moment when the
// virtual clock has a fractional part: the restart from V rounded up would
// cost the caller that fraction (and the reported Remaining a whole token),
// which an owner that can move the state's origin (Bucket) avoids by
// restarting its state at t exactly and stepping again.
func (p *Params) step(tat int64, t Instant, cost int64, reanchor bool) (int64, sluice.Decision, bool) {
	// p.base, written out: this is the hot path of every decision.
	d := t.Elapsed
	if uint64(d) > uint64(p.maxElap) { // (clamped to [0, MaxElapsed]: one compare when inside)
		d = min(max(d, 0), p.maxElap)
	}
	var q, r uint64
	if p.whole1 { // (what byDen.div gives for den 1: the product's low word)
		q = uint64(d)*p.num + t.Phase
	} else {
		hi, lo := bits.Mul64(uint64(d), p.num)
		var c uint64
		lo, c = bits.Add64(lo, t.Phase, 0)
		q, r = p.byDen.div(hi+c, lo)
	}
	v, base, full := int64(q), tat, tat <= int64(q)
	if full {
		base = v
		if r != 0 {
			if reanchor && cost > 0 {
				return tat, sluice.Decision{}, true
			}
			base++
		}
	}
	nt := base + cost*p.unit
	if (full || nt-v <= p.capUnits) && nt <= MaxState {
		rem := p.whole(max(p.capUnits-(nt-v), 0))
		reset := p.wait(nt, t)
		if cost == 0 {
			nt = tat
		}
		return nt, sluice.Decision{Allowed: true, Remaining: rem, ResetAfter: reset}, false
	}
	// Refused: the state is not full (a full bucket admits any cost up to
	// its capacity).
	retry, reset := p.waits(nt-p.capUnits, base, t)
	return tat, sluice.Decision{
		Remaining:  p.whole(max(p.capUnits-(base-v), 0)),
		RetryAfter: retry,
		ResetAfter: reset,
	}, false
}

// waits is wait for two targets at once, written out so that the two
// divisions overlap (a refusal needs both; this saved 2 ns of 45).
func (p *Params) waits(t1, t2 int64, t Instant) (time.Duration, time.Duration) {
	if p.whole1 && t.Phase == 0 && t1 > 0 && t2 > 0 {
		return time.Duration(max(p.ceilNum(uint64(t1))-t.Elapsed, 0)), time.Duration(max(p.ceilNum(uint64(t2))-t.Elapsed, 0))
	}
	h1, l1 := bits.Mul64(uint64(t1), p.den)
	h2, l2 := bits.Mul64(uint64(t2), p.den)
	var b1, b2 uint64
	l1, b1 = bits.Sub64(l1, t.Phase, 0)
	l2, b2 = bits.Sub64(l2, t.Phase, 0)
	h1 -= b1
	h2 -= b2
	if t1 <= 0 || t2 <= 0 || h1 >= p.num || h2 >= p.num {
		return p.wait(t1, t), p.wait(t2, t)
	}
	q1, r1 := p.byNum.div(h1, l1)
	q2, r2 := p.byNum.div(h2, l2)
	if r1 != 0 {
		q1++
	}
	if r2 != 0 {
		q2++
	}
	if q1 > math.MaxInt64 || q2 > math.MaxInt64 {
		return p.wait(t1, t), p.wait(t2, t)
	}
	return time.Duration(max(int64(q1)-t.Elapsed, 0)), time.Duration(max(int64(q2)-t.Elapsed, 0))
}

// Reserve is the transition for a reservation: it books cost tokens at the
// earliest time they are available, letting the state go into debt, and
// returns the new state and the wait until the tokens are there. It books
// nothing and returns ok=false when that wait exceeds maxWait or the state
// would run more than MaxAhead ahead of the virtual clock.
func (p *Params) Reserve(tat int64, t Instant, cost int64, maxWait time.Duration) (nt int64, wait time.Duration, ok bool) {
	v, base, _ := p.base(tat, t)
	nt = base + cost*p.unit
	if nt-v > MaxAhead {
		return tat, 0, false
	}
	wait = p.wait(nt-p.capUnits, t)
	if wait > maxWait {
		return tat, wait, false
	}
	return nt, wait, true
}

// Pause is the state of a bucket told at t to pause for d (a server's
// retry hint): empty exactly d after t, its debt reaching to then, so that
// nothing is admitted before and it refills from empty at its rate after;
// tat itself when that is later (a shorter pause than one in force changes
// nothing). A pause beyond MaxElapsed is cut to it.
func (p *Params) Pause(tat int64, t Instant, d time.Duration) int64 {
	e := t.Elapsed
	if int64(d) > p.maxElap-max(e, 0) {
		e = p.maxElap
	} else {
		e += int64(d)
	}
	return max(tat, p.Units(Instant{Elapsed: e, Phase: t.Phase})+p.capUnits)
}

// Lower is the state of a bucket told at t that it holds at most n tokens
// (a provider's own count, lower than the bucket's): exactly n tokens at t
// when it held more, tat itself when it held n or fewer (never raised).
// n < 0 counts as 0; n at or above the capacity changes nothing.
func (p *Params) Lower(tat int64, t Instant, n int64) int64 {
	if n >= p.capUnits/p.unit {
		return tat
	}
	return max(tat, p.Units(t)+p.capUnits-max(n, 0)*p.unit)
}

// Charge takes n tokens at t whatever the state holds, letting it go into
// debt (a cost found to be larger than reserved) of at most one capacity:
// the state is capped at 2*CapacityUnits (the bucket holds no fewer than
// -Capacity tokens) and MaxAhead ahead of the virtual clock, so that no
// charge, however large, holds the bucket empty for longer than twice its
// refill time. (Reservations are not capped so: a queue of bookings may
// run deeper.)
func (p *Params) Charge(tat int64, t Instant, n int64) int64 {
	v, base, _ := p.base(tat, t)
	limit := v + min(2*p.capUnits, MaxAhead)
	if base >= limit || n >= (limit-base)/p.unit {
		return max(base, limit)
	}
	return base + n*p.unit
}

// Refund returns cost tokens to the state (the inverse of a booking).
func (p *Params) Refund(tat, cost int64) int64 { return tat - cost*p.unit }

// ceilNum returns ceil(x / num) for 0 < x < 2^63 when whole1: the least
// elapsed time at which V = d*num reaches x (what wait's 128-bit division
// gives when den is 1 and the phase 0).
func (p *Params) ceilNum(x uint64) int64 {
	q := p.byNum63.div(x)
	if q*p.num != x {
		q++
	}
	return int64(q)
}

// whole returns x units (x >= 0) in whole tokens, rounded down.
func (p *Params) whole(x int64) int64 {
	return int64(p.byUnit.div(uint64(x)))
}

// Rebase moves the state's origin forward to t (t.Elapsed >= 0) and returns
// the new state and the new origin: applied ns after the old one, with the
// phase the virtual clock has there. It is exact: every later decision is
// the same as without rebasing. A state that is full at t takes all of
// t.Elapsed; otherwise at most MaxElapsed is applied (call again for the
// rest). A state fuller than full is clamped to full.
func (p *Params) Rebase(tat int64, t Instant) (nt int64, applied int64, phase uint64) {
	d := t.Elapsed
	if d > p.maxElap {
		if tat <= p.Units(Instant{p.maxElap, t.Phase}) {
			return 0, d, 0
		}
		d = p.maxElap
	}
	d = max(d, 0)
	hi, lo := bits.Mul64(uint64(d), p.num)
	var c uint64
	lo, c = bits.Add64(lo, t.Phase, 0)
	q, r := bits.Div64(hi+c, lo, p.den)
	nt = tat - int64(q)
	if nt <= 0 {
		return 0, d, 0 // full: the fraction no longer matters
	}
	return nt, d, r
}

// Convert returns the state under q, at q's origin, that holds the same
// number of tokens as state tat under p at d ns after p's origin: credit is
// neither created nor lost, except that tokens above q's capacity are
// dropped and fractions below q's unit round down. Debt is kept.
func (p *Params) Convert(tat int64, at Instant, q *Params) int64 {
	t := p.Tokens(tat, at) // units of p, <= p.capUnits
	if t >= 0 && p.whole(t) >= q.limit.Capacity {
		return 0 // full under q
	}
	// u = t * q.unit / p.unit, rounded down (toward more debt when t < 0).
	mag := uint64(t)
	if t < 0 {
		mag = uint64(-t)
	}
	hi, lo := bits.Mul64(mag, uint64(q.unit))
	var u int64
	if hi >= uint64(p.unit) {
		u = MaxAhead // more than any state holds
	} else {
		quo, rem := bits.Div64(hi, lo, uint64(p.unit))
		if t < 0 && rem != 0 {
			quo++
		}
		u = int64(min(quo, MaxAhead))
	}
	if t < 0 {
		u = -u
	}
	if u >= q.capUnits {
		return 0
	}
	return min(q.capUnits-u, MaxAhead)
}
