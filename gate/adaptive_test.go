// Tests of Config.Adaptive: the ceiling lowered by an overload once per
// cooldown, climbing back, in process and shared through a store.

package gate

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store/memstore"
)

func near(a, b float64) bool { return math.Abs(a-b) <= b/AdaptiveLevels+1e-9 }

// In process: an overload halves the refill (once per cooldown), the rate
// climbs by Increase per second up to Max, and admissions follow it.
func TestAdaptiveLocal(t *testing.T) {
	clk := sluice.NewManualClock(time.Unix(1000, 0))
	g, err := New(Config{Limit: bucket.Limit{Capacity: 1, Rate: 100}, Clock: clk,
		Adaptive: &Adaptive{Min: 10, Increase: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if r := g.Refill(); !near(r, 100) {
		t.Fatalf("a new ceiling starts at Max: %v", r)
	}
	if !g.Overloaded() || !near(g.Refill(), 50) {
		t.Fatalf("an overload halves the refill: %v", g.Refill())
	}
	if g.Overloaded() || !near(g.Refill(), 50) {
		t.Fatalf("a second overload within the cooldown does nothing: %v", g.Refill())
	}
	clk.Advance(time.Second) // +10
	if !g.Overloaded() || !near(g.Refill(), 30) {
		t.Fatalf("after the cooldown (climbed to 60) an overload halves again: %v", g.Refill())
	}
	for range 5 {
		clk.Advance(time.Second)
		g.Overloaded()
	}
	if r := g.Refill(); !near(r, 10) && r < 10 {
		t.Fatalf("never below Min: %v", r)
	}
	// admissions follow the ceiling: at 10 per second, one token every 100 ms
	ctx := context.Background()
	g.Do(ctx, 1, func(context.Context) error { return nil }) //nolint:errcheck // drain the burst
	clk.Advance(50 * time.Millisecond)
	if err := g.Do(ctx, 1, func(context.Context) error { return nil }); !errors.Is(err, sluice.ErrQueueFull) {
		t.Fatalf("at the ceiling (10/s plus 5 ms of climb) no token after 50 ms: %v", err)
	}
	clk.Advance(100 * time.Millisecond)
	if err := g.Do(ctx, 1, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("one token after 150 ms: %v", err)
	}
	clk.Advance(20 * time.Second)
	if r := g.Refill(); !near(r, 100) {
		t.Fatalf("climbs back to Max and stays there: %v", r)
	}
}

func TestAdaptiveConfig(t *testing.T) {
	for _, a := range []Adaptive{{}, {Min: 200}, {Min: 1, Decrease: 1}, {Min: 1, Increase: -1}, {Min: 1, Cooldown: -1}} {
		if _, err := New(Config{Limit: bucket.PerSecond(100), Adaptive: &a}); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v", a, err)
		}
	}
	g, _ := New(Config{Limit: bucket.PerSecond(100)})
	if g.Overloaded() || g.Refill() != 100 {
		t.Fatal("without Adaptive: no change")
	}
}

// Shared: one gate's overload lowers the ceiling of every gate of its name
// on the store (read at their next admission), the cooldown is shared,
// and the fleet climbs back together.
func TestAdaptiveShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		mk := func() *Gate {
			g, err := New(Config{Name: "llm", Limit: bucket.Limit{Capacity: 1, Rate: 100}, Store: st, MaxQueue: 100, MaxWait: time.Minute,
				Adaptive: &Adaptive{Min: 10, Increase: 10}})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		a, b := mk(), mk()
		ctx := context.Background()
		nop := func(context.Context) error { return nil }
		if !a.Overloaded() || !near(a.Refill(), 50) {
			t.Fatalf("a's overload halves the ceiling: %v", a.Refill())
		}
		if b.Overloaded() {
			t.Fatal("b's overload within a's cooldown does nothing")
		}
		if !near(b.Refill(), 50) {
			t.Fatalf("b read the ceiling a lowered: %v", b.Refill())
		}
		// b admits at 50 per second: 1 (burst) + 50 in the next second
		start := time.Now()
		n := 0
		for time.Since(start) < time.Second {
			if err := b.Do(ctx, 1, nop); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n < 48 || n > 56 {
			t.Fatalf("b admitted %d in a second at a ceiling of 50 (+10/s)", n)
		}
		time.Sleep(10 * time.Second)
		a.Do(ctx, 1, nop) //nolint:errcheck
		b.Do(ctx, 1, nop) //nolint:errcheck
		if !near(a.Refill(), 100) || !near(b.Refill(), 100) {
			t.Fatalf("both climb back to Max: %v %v", a.Refill(), b.Refill())
		}
	})
}
