package sim_test

import (
	"math"
	"testing"

	"github.com/sluicehq/sluice/sim"
)

// Admissions exactly every 20 ms are exactly 5 per 100 ms bin: 50/s flat,
// however the boundaries (0.3 s, 0.7 s, ...) fall in floating point.
func TestRatesBinExactly(t *testing.T) {
	rep := &sim.Report{}
	for i := range 1000 { // 20 s
		at := math.Round(float64(i)*0.02*1e9) / 1e9 // as sim.Run records times
		rep.Outcomes = append(rep.Outcomes, sim.Outcome{T: at, Allowed: true, AdmittedAt: &at})
	}
	offered, admitted := sim.Rates(rep)
	if len(admitted) != 200 || len(offered) != 200 {
		t.Fatalf("%d and %d bins, want 200", len(offered), len(admitted))
	}
	for i := range admitted {
		if admitted[i].Y != 50 || offered[i].Y != 50 {
			t.Fatalf("bin %d at %v: offered %v/s, admitted %v/s, want 50", i, admitted[i].X, offered[i].Y, admitted[i].Y)
		}
	}

	// The pulse of docs/behaviour.md section 3: after the burst at t=0, one
	// admission every 20 ms until 19.6 s.
	_, tb := sim.Rates(pulse(t, "token_bucket", 30_000))
	for i := 1; i < 196; i++ {
		if tb[i].Y != 50 {
			t.Fatalf("pulse: bin %d at %v: %v/s, want 50", i, tb[i].X, tb[i].Y)
		}
	}
	if tb[0].Y != 240 || tb[196].Y != 10 {
		t.Fatalf("pulse: first bin %v/s (want 240: 20 + 4), last %v/s (want 10)", tb[0].Y, tb[196].Y)
	}
}
