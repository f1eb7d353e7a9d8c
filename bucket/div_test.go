package bucket

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

func checkDiv(t testing.TB, d, hi, lo uint64) {
	if d == 0 || hi >= d {
		return
	}
	x := newDivisor(d)
	q, r := x.div(hi, lo)
	wq, wr := bits.Div64(hi, lo, d)
	if q != wq || r != wr {
		t.Fatalf("(%d,%d)/%d = %d r %d, want %d r %d", hi, lo, d, q, r, wq, wr)
	}
}

func TestDivisorMatchesDiv64(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 9))
	edge := []uint64{1, 2, 3, 4, 5, 1 << 24, 1953125, 1<<63 - 1, 1 << 63, ^uint64(0), ^uint64(0) - 1}
	for _, d := range edge {
		for _, hi := range []uint64{0, d - 1, d / 2} {
			for _, lo := range []uint64{0, 1, ^uint64(0), d, d - 1} {
				checkDiv(t, d, hi, lo)
			}
		}
	}
	for range 2_000_000 {
		d := rng.Uint64() >> rng.UintN(64)
		if rng.IntN(4) == 0 {
			d = 1 << rng.UintN(64)
		}
		if d == 0 {
			continue
		}
		checkDiv(t, d, rng.Uint64N(d), rng.Uint64())
	}
}

func FuzzDivisor(f *testing.F) {
	f.Add(uint64(7), uint64(3), uint64(99))
	f.Fuzz(func(t *testing.T, d, hi, lo uint64) { checkDiv(t, d, hi, lo) })
}

// TestDiv63MatchesDivision: div63 is exact for every dividend below 2^63
// (edges: 0, multiples of the divisor and their neighbours, the largest)
// and random divisors of every size, 6e8 and 1e9 (a token of "100 per
// minute" and of "1 per second") among them.
func TestDiv63MatchesDivision(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	check := func(u, n uint64) {
		x := newDiv63(u)
		if q := x.div(n); q != n/u {
			t.Fatalf("%d/%d = %d, want %d", n, u, q, n/u)
		}
	}
	edge := []uint64{1, 2, 3, 5, 7, 6e8, 1e9, 1953125, 1<<61 - 1, 1 << 61, 1<<62 + 1, 1<<63 - 1}
	for _, u := range edge {
		for _, n := range []uint64{0, 1, u - 1, u, u + 1, 2*u - 1, 1<<63 - 1, 1<<63 - 2, (1<<63 - 1) / u * u, (1<<63-1)/u*u - 1} {
			if n < 1<<63 {
				check(u, n)
			}
		}
	}
	for range 2_000_000 {
		u := rng.Uint64() >> (1 + rng.UintN(63))
		if u == 0 {
			continue
		}
		check(u, rng.Uint64()>>1)
		if n := rng.Uint64N(1<<63/u+1)*u - rng.Uint64N(2); n < 1<<63 { // (near a multiple)
			check(u, n)
		}
	}
}
