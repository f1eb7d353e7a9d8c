package gate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
)

// A zero Gate admits nothing and says why; nothing panics, and fn is never
// called.
func TestZeroGate(t *testing.T) {
	var g gate.Gate
	const want = "sluice: gate: not made with gate.New"
	for _, cost := range []int64{-1, 0, 1} {
		called := false
		err := g.Do(context.Background(), cost, func(context.Context) error { called = true; return nil })
		if err == nil || err.Error() != want || !errors.Is(err, sluice.ErrInvalidLimit) || called {
			t.Errorf("Do(%d): %v (fn called: %v), want %q", cost, err, called, want)
		}
		tk, err := g.Reserve(context.Background(), cost)
		if err == nil || err.Error() != want || !errors.Is(err, sluice.ErrInvalidLimit) || tk != nil {
			t.Errorf("Reserve(%d): %v %v, want %q", cost, tk, err, want)
		}
	}
	g.Pause(time.Second)
	if s := g.Stats(); s.Admitted != 0 || s.Tokens != 0 || s.InFlight != 0 {
		t.Errorf("Stats: %+v", s)
	}
	if g.Limit() != (bucket.Limit{}) {
		t.Errorf("Limit: %+v", g.Limit())
	}
}
