// The fair-share proofs on memory (issue 28), two limiters sharing
// one memstore standing in for two instances, on a manual clock: a flood
// held to its share, the flood's refill back when the others stop, and
// weights' shares.

package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// proofSrc: capacity 100 refilled at 100 per second (B = 100, r = 100),
// a tenant active for 2 s after it asked.
const proofSrc = `
limits:
  - name: provider_tpm
    key: "provider:{provider}"
    capacity: 100
    refill_per_second: 100
    fair_share: {by: tenant, weights: {heavy: 3}, active_window: 2s}
`

// shareProof is two limiters on one memstore and a manual clock, and each
// tenant's asked and admitted counts in a span of time.
type shareProof struct {
	t     *testing.T
	clock *sluice.ManualClock
	ls    [2]*limiter.Limiter
	n     int
}

func newShareProof(t *testing.T) *shareProof {
	c := sluice.NewManualClock(storetest.Epoch)
	st := memstore.New(memstore.WithClock(c))
	return &shareProof{t: t, clock: c, ls: [2]*limiter.Limiter{limiterOver(t, proofSrc, st), limiterOver(t, proofSrc, st)}}
}

// run advances the clock 1 ms at a time for d, and at each ms sends one
// request of cost 1 for each tenant whose period (in ms) divides the ms
// (offset by its index), alternating between the two limiters; it
// returns each tenant's asked and admitted counts.
func (p *shareProof) run(d time.Duration, periods map[string]int) (asked, admitted map[string]int) {
	asked, admitted = map[string]int{}, map[string]int{}
	names := []string{"A", "B", "C", "heavy", "light"}
	for ms := range int(d / time.Millisecond) {
		p.clock.Advance(time.Millisecond)
		for k, name := range names {
			per, ok := periods[name]
			if !ok || (ms+k*per/len(names))%per != 0 {
				continue
			}
			p.n++
			res, err := p.ls[p.n%2].Check(context.Background(), limiter.Request{
				Descriptors: map[string]string{"provider": "openai", "tenant": name}, Cost: 1})
			if err != nil {
				p.t.Fatal(err)
			}
			asked[name]++
			if res.Allowed {
				admitted[name]++
			}
		}
	}
	return asked, admitted
}

func pct(a, b int) float64 { return 100 * float64(a) / float64(b) }

// A floods at 10x the refill, B and C send 20 % of it each: B and C are
// admitted >= 98 % of what they ask, A the rest, the total within
// B + r·t; once B and C stop, A gets >= 95 % of the refill within the
// active window.
func TestFairShareProofFlood(t *testing.T) {
	p := newShareProof(t)
	const secs = 10
	asked, admitted := p.run(secs*time.Second, map[string]int{"A": 1, "B": 50, "C": 50})
	total := admitted["A"] + admitted["B"] + admitted["C"]
	t.Logf("flood %d s: A %d/%d, B %d/%d (%.1f %%), C %d/%d (%.1f %%); admitted %d, r·t %d, B + r·t %d",
		secs, admitted["A"], asked["A"], admitted["B"], asked["B"], pct(admitted["B"], asked["B"]),
		admitted["C"], asked["C"], pct(admitted["C"], asked["C"]), total, 100*secs, 100+100*secs)
	for _, x := range []string{"B", "C"} {
		if pct(admitted[x], asked[x]) < 98 {
			t.Errorf("%s admitted %d of %d: below 98 %%", x, admitted[x], asked[x])
		}
	}
	if total > 100+100*secs {
		t.Errorf("admitted %d: above B + r·t = %d", total, 100+100*secs)
	}
	if admitted["A"] < 100*secs-admitted["B"]-admitted["C"]-100 {
		t.Errorf("A admitted %d: it does not get the rest of the refill", admitted["A"])
	}
	// B and C stop: A alone, within the active window (2 s) and after.
	_, in := p.run(2*time.Second, map[string]int{"A": 1})
	_, after := p.run(2*time.Second, map[string]int{"A": 1})
	t.Logf("after B and C stop: A %d in the active window (%.1f %% of r·t = 200), %d in the next 2 s (%.1f %%)",
		in["A"], pct(in["A"], 200), after["A"], pct(after["A"], 200))
	if pct(in["A"], 200) < 95 || pct(after["A"], 200) < 95 {
		t.Errorf("A alone got %d and %d of a refill of 200: below 95 %%", in["A"], after["A"])
	}
}

// Weights 3:1, both flooding at 10x the refill: their shares of what is
// admitted are 75 % and 25 %, within ±5 % of each.
func TestFairShareProofWeights(t *testing.T) {
	p := newShareProof(t)
	p.run(2*time.Second, map[string]int{"heavy": 1, "light": 1}) // warm-up: the first burst of the full bucket
	const secs = 20
	_, admitted := p.run(secs*time.Second, map[string]int{"heavy": 1, "light": 1})
	total := admitted["heavy"] + admitted["light"]
	h, l := pct(admitted["heavy"], total), pct(admitted["light"], total)
	t.Logf("weights 3:1 over %d s: heavy %d (%.2f %%), light %d (%.2f %%) of %d admitted (r·t %d)", secs, admitted["heavy"], h, admitted["light"], l, total, 100*secs)
	if h < 75*0.95 || h > 75*1.05 || l < 25*0.95 || l > 25*1.05 {
		t.Errorf("shares %.2f %% and %.2f %%: not within ±5 %% of 75 and 25", h, l)
	}
	if total > 100*secs+100 {
		t.Errorf("admitted %d: above B + r·t", total)
	}
}
