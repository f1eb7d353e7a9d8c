// The whole-units shortcut (Params.whole1: den 1, V a product, waits a 63-bit division) against the general 128-bit arithmetic.

package bucket

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestWhole1MatchesGeneral steps, reads and waits on limits compiled with
// den 1 both through the shortcut and with it switched off (the general
// path: byDen and byNum's 128-bit divisions), on edges and random states,
// instants, phases and costs, and requires identical answers. It fails when
// the shortcut gives a different V, wait or decision anywhere.
func TestWhole1MatchesGeneral(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(27, 1))
	limits := []Limit{
		{Capacity: 1e9, Rate: 1e9}, {Capacity: 1, Rate: 1}, {Capacity: 10, Rate: 3}, {Capacity: 100, Rate: 100.0 / 60},
		{Capacity: 7, Rate: 7.0 / 3600}, {Capacity: 1 << 40, Rate: 123456789}, {Capacity: 5, Rate: 0.5},
		{Capacity: 1000, Rate: 1e6}, {Capacity: 3, Rate: 1.0 / 86400},
	}
	for range 40 {
		n := 1 + rng.Int64N(1000)
		per := []time.Duration{time.Nanosecond, time.Microsecond, time.Millisecond, time.Second, time.Minute, time.Hour}[rng.IntN(6)]
		limits = append(limits, Limit{Capacity: 1 + rng.Int64N(1e6), Rate: float64(n) * float64(time.Second) / float64(per)})
	}
	tested := 0
	for _, l := range limits {
		for _, small := range []bool{false, true} {
			compile := Compile
			if small {
				compile = CompileSmall
			}
			p, err := compile(l)
			if err != nil || !p.whole1 {
				continue
			}
			tested++
			g := p
			g.whole1 = false
			states := []int64{0, 1, p.capUnits / 2, p.capUnits - 1, p.capUnits, p.capUnits + 1, 2 * p.capUnits, MaxState - 1}
			elapsed := []int64{0, 1, 29, p.maxElap / 2, p.maxElap - 1, p.maxElap, p.maxElap + 1, -1}
			for k := range 3000 {
				var tat, d int64
				if k < len(states)*len(elapsed) {
					tat, d = states[k%len(states)], elapsed[k/len(states)]
				} else {
					d = rng.Int64N(p.maxElap + 1)
					tat = max(0, p.Units(At(d))+rng.Int64N(2*p.capUnits+1)-p.capUnits/2)
				}
				var phase uint64
				if k%7 == 3 {
					phase = uint64(rng.IntN(3)) // (den 1 keeps phase 0; other phases take the general path, still equal)
				}
				at := Instant{Elapsed: d, Phase: phase}
				if a, b := p.Units(at), g.Units(at); a != b {
					t.Fatalf("%+v: Units(%+v) = %d, general %d", l, at, a, b)
				}
				cost := rng.Int64N(l.Capacity + 1)
				if k%5 == 0 {
					cost = l.Capacity
				}
				n1, d1 := p.Step(tat, at, cost)
				n2, d2 := g.Step(tat, at, cost)
				if n1 != n2 || d1 != d2 {
					t.Fatalf("%+v: Step(%d, %+v, %d) = %d %+v, general %d %+v", l, tat, at, cost, n1, d1, n2, d2)
				}
				target := tat + rng.Int64N(p.capUnits+1)
				if a, b := p.wait(target, at), g.wait(target, at); a != b {
					t.Fatalf("%+v: wait(%d, %+v) = %v, general %v", l, target, at, a, b)
				}
				r1, s1 := p.waits(target, tat, at)
				r2, s2 := g.waits(target, tat, at)
				if r1 != r2 || s1 != s2 {
					t.Fatalf("%+v: waits(%d, %d, %+v) = %v %v, general %v %v", l, target, tat, at, r1, s1, r2, s2)
				}
			}
		}
	}
	if tested < 20 {
		t.Fatalf("only %d limits compiled with den 1", tested)
	}
}
