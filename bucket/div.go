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
