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
