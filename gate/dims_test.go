package gate_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
)

func dimsGate(t *testing.T) *gate.Gate {
	t.Helper()
	g, err := gate.New(gate.Config{Name: "llm", Limit: bucket.PerSecond(100), MaxQueue: 10, MaxWait: 20 * time.Second,
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 100}}}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func tokens(g *gate.Gate) float64 { return g.Stats().Dimensions[0].Tokens }

// A call is admitted when every dimension admits it: a call charging more
// tokens than are there waits for them, in arrival order, and its requests
// token is not spent meanwhile by anyone else's turn.
func TestDimensionsAllOrNothingFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := dimsGate(t)
		ctx := context.Background()
		nop := func(context.Context) error { return nil }
		start := time.Now()
		if err := g.Do(ctx, 1, nop, gate.Charge("tokens", 1000)); err != nil || time.Since(start) != 0 {
			t.Fatalf("first: %v after %v", err, time.Since(start))
		}
		done := make(chan time.Duration, 2)
		go func() { g.Do(ctx, 1, nop, gate.Charge("tokens", 600)); done <- time.Since(start) }()
		synctest.Wait()
		go func() { g.Do(ctx, 1, nop, gate.Charge("tokens", 100)); done <- time.Since(start) }()
		if a, b := <-done, <-done; a != 6*time.Second || b != 7*time.Second {
			t.Fatalf("admitted at %v and %v, want 6 s (600 tokens at 100/s) and 7 s behind it", a, b)
		}
		// a call without a Charge charges the dimension 0
		before := tokens(g)
		if err := g.Do(ctx, 1, nop); err != nil || tokens(g) != before {
			t.Fatalf("no charge: %v, tokens %v -> %v", err, before, tokens(g))
		}
	})
}

// Bad charges refuse the call and take nothing.
func TestDimensionsBadCharges(t *testing.T) {
	g := dimsGate(t)
	ctx := context.Background()
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	for _, tc := range []struct {
		opt gate.Option
		is  error
	}{
		{gate.Charge("tokenz", 1), sluice.ErrInvalidCost},
		{gate.Charge("tokens", -1), sluice.ErrInvalidCost},
		{gate.Charge("tokens", 1001), sluice.ErrCostExceedsCapacity},
	} {
		if err := g.Do(ctx, 1, fn, tc.opt); !errors.Is(err, tc.is) {
			t.Errorf("%v, want %v", err, tc.is)
		}
		if _, err := g.Reserve(ctx, 1, tc.opt); !errors.Is(err, tc.is) {
			t.Errorf("Reserve: %v, want %v", err, tc.is)
		}
	}
	if ran || tokens(g) != 1000 || g.Stats().Tokens != 100 {
		t.Fatalf("refused calls took: ran %v, tokens %v, requests %v", ran, tokens(g), g.Stats().Tokens)
	}
	for _, cfg := range []gate.Config{
		{Limit: bucket.PerSecond(1), Dimensions: []gate.Dimension{{Limit: bucket.PerSecond(1)}}},
		{Limit: bucket.PerSecond(1), Dimensions: []gate.Dimension{{Name: "t", Limit: bucket.PerSecond(1)}, {Name: "t", Limit: bucket.PerSecond(1)}}},
		{Limit: bucket.PerSecond(1), Dimensions: []gate.Dimension{{Name: "t"}}},
	} {
		if _, err := gate.New(cfg); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v", cfg.Dimensions, err)
		}
	}
}

// Reserve charges an estimate; SettleCharge settles each dimension with
// its actual cost (a dimension not charged is settled from 0).
func TestDimensionsSettleCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := gate.New(gate.Config{Limit: bucket.PerSecond(10), MaxQueue: 1, MaxWait: time.Second,
			Dimensions: []gate.Dimension{{Name: "input_tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 1}},
				{Name: "output_tokens", Limit: bucket.Limit{Capacity: 500, Rate: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		tk, err := g.Reserve(context.Background(), 1, gate.Charge("input_tokens", 800))
		if err != nil {
			t.Fatal(err)
		}
		d := g.Stats().Dimensions
		if d[0].Tokens != 200 || d[1].Tokens != 500 {
			t.Fatalf("after the estimate: %+v", d)
		}
		if err := tk.SettleCharge("input_tokens", 300); err != nil {
			t.Fatal(err)
		}
		if err := tk.SettleCharge("output_tokens", 120); err != nil {
			t.Fatal(err)
		}
		if err := tk.SettleCharge("tokens", 1); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Fatalf("unknown dimension: %v", err)
		}
		tk.Release()
		d = g.Stats().Dimensions
		if d[0].Tokens != 700 || d[1].Tokens != 380 || d[0].Name != "input_tokens" {
			t.Fatalf("after settling 300 and 120: %+v", d)
		}
	})
}

// A waiter that gives up returns its charges exactly; the one behind it
// moves up.
func TestDimensionsCancelledWaiterReturnsCharges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := dimsGate(t)
		bg := context.Background()
		nop := func(context.Context) error { return nil }
		g.Do(bg, 1, nop, gate.Charge("tokens", 1000))
		start := time.Now()
		ctx, cancel := context.WithCancel(bg)
		errc := make(chan error, 1)
		go func() { errc <- g.Do(ctx, 1, nop, gate.Charge("tokens", 500)) }()
		synctest.Wait()
		done := make(chan time.Duration, 1)
		go func() { g.Do(bg, 1, nop, gate.Charge("tokens", 200)); done <- time.Since(start) }()
		synctest.Wait()
		time.Sleep(time.Second)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
		if at := <-done; at != 2*time.Second {
			t.Fatalf("the waiter behind moved up to 2 s (200 tokens at 100/s), got %v", at)
		}
	})
}

// Lower lowers a budget to a provider's count, never raising it;
// PauseDimension holds the calls that charge that dimension only.
func TestLowerAndPauseDimension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := dimsGate(t)
		ctx := context.Background()
		nop := func(context.Context) error { return nil }
		if !g.Lower("tokens", 300) || tokens(g) != 300 {
			t.Fatalf("lowered to %v", tokens(g))
		}
		if g.Lower("tokens", 900); tokens(g) != 300 {
			t.Fatalf("raised to %v", tokens(g))
		}
		if !g.Lower("requests", 5) || g.Stats().Tokens != 5 {
			t.Fatalf("requests lowered to %v", g.Stats().Tokens)
		}
		if g.Lower("bytes", 1) || g.PauseDimension("bytes", time.Second) {
			t.Fatal("an unknown dimension")
		}
		if u := g.LowerAll([]gate.Ceiling{{Dimension: "tokens", Remaining: 250}, {Dimension: "bytes", Remaining: 1}, {Dimension: "requests", Remaining: 4}}); len(u) != 1 || u[0] != "bytes" ||
			tokens(g) != 250 || g.Stats().Tokens != 4 {
			t.Fatalf("LowerAll: unknown %v, tokens %v, requests %v", u, tokens(g), g.Stats().Tokens)
		}
		start := time.Now()
		g.PauseDimension("tokens", 2*time.Second)
		if err := g.Do(ctx, 1, nop); err != nil || time.Since(start) != 0 {
			t.Fatalf("a call not charging tokens waits: %v after %v", err, time.Since(start))
		}
		if err := g.Do(ctx, 1, nop, gate.Charge("tokens", 10)); err != nil || time.Since(start) != 2*time.Second {
			t.Fatalf("a call charging tokens waits for the pause: %v after %v", err, time.Since(start))
		}
		short, _ := gate.New(gate.Config{Limit: bucket.PerSecond(100), MaxQueue: 10, MaxWait: time.Second,
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.PerSecond(100)}}})
		short.PauseDimension("tokens", 5*time.Second)
		if err := short.Do(ctx, 1, nop, gate.Charge("tokens", 1)); !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("a pause longer than MaxWait: %v", err)
		}
	})
}
