// Compiling a Limit into Params: the choice of unit, time scale and tick.

package bucket

import (
	"math"
	"math/bits"
)

// Compile checks l and returns its fixed-point parameters. The error matches
// sluice.ErrInvalidLimit and names the offending value.
func Compile(l Limit) (Params, error) {
	r := l.Rate
	switch {
	case l.Capacity < 1:
		return Params{}, invalid("capacity %d must be at least 1", l.Capacity)
	case math.IsNaN(r) || math.IsInf(r, 0):
		return Params{}, invalid("rate %v must be finite", r)
	case r <= 0:
		return Params{}, invalid("rate %v must be positive", r)
	case l.Capacity > maxCapUnits:
		return Params{}, invalid("capacity %d exceeds the maximum %d", l.Capacity, int64(maxCapUnits))
	case r > maxUnitsPerSecond:
		return Params{}, invalid("rate %v/s exceeds the maximum %v/s", r, float64(maxUnitsPerSecond))
	case float64(l.Capacity)/r*1e9 > maxFill:
		return Params{}, invalid("capacity %d at rate %v/s takes %.3g s to refill, more than the maximum %.3g s",
			l.Capacity, r, float64(l.Capacity)/r, float64(maxFill)/1e9)
	}
	if a, b, ok := l.fraction(); ok {
		if p, ok := wholeUnits(l, a, b); ok {
			return p, nil
		}
	}
	return binaryUnits(l)
}

// smallUnits is the largest capacity in units that CompileSmall aims
// for: every intermediate of a decision then stays an exact integer in a
// float64 (below 2^53) while the state is near its capacity.
const smallUnits = 1 << 52

// maxSmallDen bounds the ticks of the clock CompileSmall may choose: the
// Redis script splits time so that products with a remainder below 2^26
// stay exact.
const maxSmallDen = 1 << 26

// CompileSmall is Compile choosing, where it can, a representation whose
// numbers stay small enough for plain float64 arithmetic (the Redis
// script's double path): for a rate of a/b tokens per nanosecond it takes
// the finest clock tick d (a divisor of b, d < 2^26; d = 1 is Compile's
// whole units) for which one token = b/d units keeps the capacity below
// 2^52 units, so that each tick of d nanoseconds adds exactly a units.
// Decisions are exact in either form (a state reads the clock rounded
// down to its tick, restarts exactly), and the stores, which restart a
// full bucket at its own origin, lose nothing to it; the in-process
// Bucket uses Compile. When no such tick exists it is Compile.
func CompileSmall(l Limit) (Params, error) {
	p, err := Compile(l)
	if err != nil || p.capUnits < smallUnits && p.den < maxSmallDen {
		return p, err
	}
	a, b, ok := l.fraction()
	if !ok {
		return p, nil
	}
	// The least tick: d > capacity*b/2^52, a divisor of b.
	hi, lo := bits.Mul64(uint64(l.Capacity), b)
	if hi >= smallUnits {
		return p, nil
	}
	need, _ := bits.Div64(hi, lo, smallUnits)
	best := uint64(0)
	for _, d := range divisors(b) {
		if d > need && d < maxSmallDen && (best == 0 || d < best) {
			if hi, c := bits.Mul64(uint64(l.Capacity), b/d); hi == 0 && c < smallUnits {
				best = d
			}
		}
	}
	if best == 0 {
		return p, nil
	}
	return ticked(l, a, best, b/best), nil
}

// divisors returns divisors of n: all of them when n's prime factors are
// below 2^16 (the periods and float rates Compile meets are such), else
// those made of its small factors and the rest taken as one factor.
func divisors(n uint64) []uint64 {
	out := []uint64{1}
	rest := n
	for f := uint64(2); f < 1<<16 && f*f <= rest; f++ {
		if rest%f != 0 {
			continue
		}
		k := 0
		for rest%f == 0 {
			rest /= f
			k++
		}
		m := len(out)
		pw := uint64(1)
		for range k {
			pw *= f
			for _, x := range out[:m] {
				out = append(out, x*pw)
			}
		}
	}
	if rest > 1 {
		for _, x := range out {
			out = append(out, x*rest)
		}
	}
	return out
}

// ticked compiles rate a/(u*d) tokens per ns as one token = u units and a
// units per d ns (a and d coprime).
func ticked(l Limit, a, d, u uint64) Params {
	g := gcd(a, d)
	num, den := a/g, d/g
	p := Params{limit: l, unit: int64(u), capUnits: l.Capacity * int64(u), num: num, den: den, exact: true,
		byDen: newDivisor(den), byNum: newDivisor(num), byUnit: newDiv63(u)}
	p.setWhole1()
	if u&(u-1) == 0 {
		p.shift = uint(bits.TrailingZeros64(u))
	}
	p.maxElap = 1 << 61
	if hi, lo := bits.Mul64(maxV, den); hi < num {
		if q, _ := bits.Div64(hi, lo, num); q < 1<<61 {
			p.maxElap = int64(q)
		}
	}
	return p
}

// fraction returns the rate as a/b tokens per nanosecond (reduced), when it
// fits 64-bit integers: RatePer's fraction, else the float's own value.
func (l Limit) fraction() (a, b uint64, ok bool) {
	if n, per, ok := l.RatePer(); ok {
		a, b = uint64(n), uint64(per)
	} else {
		fr, exp := math.Frexp(l.Rate)
		m := uint64(math.Ldexp(fr, 53))
		e := exp - 53
		tz := bits.TrailingZeros64(m)
		m >>= uint(tz)
		e += tz
		switch {
		case e >= 0 && bits.Len64(m)+e < 64:
			a, b = m<<uint(e), 1e9
		case e < 0 && -e <= 33: // 1e9 < 2^30
			a, b = m, 1e9<<uint(-e)
		default:
			return 0, 0, false
		}
	}
	g := gcd(a, b)
	return a / g, b / g, true
}

// wholeUnits compiles rate a/b tokens per ns (reduced) with one token = b
// units, so that V(d) = d*a exactly, when the numbers allow it.
func wholeUnits(l Limit, a, b uint64) (Params, bool) {
	hi, capU := bits.Mul64(uint64(l.Capacity), b)
	if hi != 0 || capU > maxIntCapUnits || a > maxIntUnitsPerNs || a == 0 {
		return Params{}, false
	}
	p := Params{limit: l, unit: int64(b), capUnits: int64(capU), num: a, den: 1, exact: true,
		byDen: newDivisor(1), byNum: newDivisor(a), byUnit: newDiv63(b)}
	p.setWhole1()
	if b&(b-1) == 0 {
		p.shift = uint(bits.TrailingZeros64(b))
	}
	p.maxElap = min(int64(maxV/a), 1<<61)
	return p, true
}

// binaryUnits compiles l with one token = 2^k units and the rate's exact
// ratio of its float64 value times 2^k / 1e9 units per ns.
func binaryUnits(l Limit) (Params, error) {
	r := l.Rate
	k := uint(maxShift)
	for k > 0 && (bits.Len64(uint64(l.Capacity))+int(k) > 59 || math.Ldexp(r, int(k)) > maxUnitsPerSecond) {
		k--
	}
	// r = m * 2^e exactly; units per ns = m * 2^(e+k) / (2^9 * 5^9).
	fr, exp := math.Frexp(r)
	m := uint64(math.Ldexp(fr, 53))
	e := exp - 53
	tz := bits.TrailingZeros64(m)
	m >>= uint(tz)
	e += tz
	num, den := m, uint64(1953125) // 5^9
	for num%5 == 0 && den%5 == 0 {
		num /= 5
		den /= 5
	}
	p2 := e + int(k) - 9
	exact := true
	if p2 >= 0 {
		// Cannot overflow: units per ns <= 2^54/1e9 < 2^25 and den < 2^21.
		num <<= uint(p2)
	} else {
		s := -p2
		if over := bits.Len64(den) + s - 62; over > 0 {
			// Den would not fit: drop low bits of num (rounding the rate down,
			// against the caller, by less than 2^-(bits left in num)).
			exact = num&(1<<uint(over)-1) == 0
			num >>= uint(over)
			s -= over
		}
		den <<= uint(s)
	}
	if g := gcd(num, den); g > 1 {
		num /= g
		den /= g
	}
	if num == 0 {
		return Params{}, invalid("rate %v/s is too small to represent", r)
	}
	p := Params{limit: l, unit: 1 << k, shift: k, capUnits: l.Capacity << k, num: num, den: den, exact: exact,
		byDen: newDivisor(den), byNum: newDivisor(num), byUnit: newDiv63(1 << k)}
	p.setWhole1()
	p.maxElap = 1 << 61
	if hi, lo := bits.Mul64(maxV, den); hi < num {
		if q, _ := bits.Div64(hi, lo, num); q < 1<<61 {
			p.maxElap = int64(q)
		}
	}
	return p, nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// setWhole1 sets whole1 (and byNum63) when den is 1 and num below 2^62.
func (p *Params) setWhole1() {
	if p.den == 1 && p.num < 1<<62 {
		p.whole1, p.byNum63 = true, newDiv63(p.num)
	}
}
