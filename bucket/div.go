// Division of 128-bit numbers by a fixed 64-bit divisor through a precomputed reciprocal.

package bucket

import "math/bits"

// divisor divides 128-bit numbers by a fixed 64-bit divisor with a
// precomputed reciprocal (Möller and Granlund, "Improved division by
// invariant integers", 2011, algorithm 4): two multiplications instead of a
// hardware division, whose latency dominated a decision.
//
// Powers of two, which every "round" rate (1, 2, 5, 10, 100, 1e9 per
// second...) yields for one of its two divisors, divide by shifting.
type divisor struct {
	d    uint64 // the divisor shifted left until its top bit is set
	v    uint64 // floor((2^128 - 1) / d) - 2^64
	s    uint   // the shift
	pow2 bool   // the divisor is 2^(63-s)
}

func newDivisor(d uint64) divisor {
	s := uint(bits.LeadingZeros64(d))
	dn := d << s
	v, _ := bits.Div64(^dn, ^uint64(0), dn)
	return divisor{d: dn, v: v, s: s, pow2: d&(d-1) == 0}
}

// div returns the quotient and remainder of (hi*2^64 + lo) / d. The
// quotient must fit 64 bits (hi < d).
func (x *divisor) div(hi, lo uint64) (q, r uint64) {
	if x.pow2 {
		sh := 63 - x.s // d = 2^sh (Go shifts by 64 give 0, so sh = 0 works)
		return hi<<(64-sh) | lo>>sh, lo & (1<<sh - 1)
	}
	if x.s != 0 {
		hi = hi<<x.s | lo>>(64-x.s)
		lo <<= x.s
	}
	q1, q0 := bits.Mul64(x.v, hi)
	var c uint64
	q0, c = bits.Add64(q0, lo, 0)
	q1, _ = bits.Add64(q1, hi+1, c)
	r = lo - q1*x.d
	if r > q0 {
		q1--
		r += x.d
	}
	if r >= x.d {
		q1++
		r -= x.d
	}
	return q1, r >> x.s
}

// div63 divides numbers below 2^63 (a state's units, a non-negative int64)
// by a fixed divisor u >= 1 with one multiplication and a shift
// (Granlund and Montgomery, "Division by invariant integers using
// multiplication", 1994, theorem 4.2, for 63-bit dividends: with
// l = ceil(log2 u) and m = ceil(2^(63+l)/u), which fits 64 bits, n/u =
// floor(n*m / 2^(63+l)) for every n < 2^63), and a power of two by
// shifting. It is exact, as divisor is: Remaining in whole tokens on
// every decision's path without divisor's 128-bit steps.
type div63 struct {
	m    uint64
	s    uint
	pow2 bool
}

func newDiv63(u uint64) div63 {
	if u&(u-1) == 0 {
		return div63{s: uint(bits.TrailingZeros64(u)), pow2: true}
	}
	l := uint(bits.Len64(u))           // 2^(l-1) < u < 2^l
	q, r := bits.Div64(1<<(l-1), 0, u) // 2^(63+l) / u (its high word 2^(l-1) < u)
	if r != 0 {
		q++
	}
	return div63{m: q, s: l - 1}
}

// div returns n / u, rounded down; n < 2^63.
func (x *div63) div(n uint64) uint64 {
	if x.pow2 {
		return n >> x.s
	}
	hi, _ := bits.Mul64(n, x.m)
	return hi >> x.s
}
