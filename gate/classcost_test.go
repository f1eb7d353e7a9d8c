package gate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

// A class may never take more of a budget than its view of it (the
// capacity cut by its reserve, rounded down): a gate whose class would
// see a budget as zero is refused at New, as one that leaves a class no
// in-flight slot; a call costing more than its class's view (of Limit or
// of a Dimension) is refused at once with sluice.ErrCostExceedsCapacity
// (counted as such), in process and shared alike, and takes nothing.
func TestClassCostExceedsCapacity(t *testing.T) {
	classes := []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 500_000}}
	for _, cfg := range []gate.Config{
		{Limit: bucket.Limit{Capacity: 1, Rate: 1}, Priorities: classes},
		{Limit: bucket.Limit{Capacity: 10, Rate: 1}, Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1, Rate: 1}}}, Priorities: classes},
	} {
		if _, err := gate.New(cfg); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v, want ErrInvalidLimit", cfg, err)
		}
	}
	for _, shared := range []bool{false, true} {
		cfg := gate.Config{Name: "llm", Limit: bucket.Limit{Capacity: 10, Rate: 1}, MaxWait: time.Minute, MaxQueue: 10,
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 100, Rate: 10}}}, Priorities: classes}
		if shared {
			st := memstore.New()
			defer st.Close()
			cfg.Store = st
		}
		g, err := gate.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, c := range []struct {
			cost, tokens int64
			class        string
			exceeds      bool
		}{{6, 1, "batch", true}, {1, 51, "batch", true}, {5, 50, "batch", false}, {5, 50, "interactive", false}} {
			err := g.Do(ctx, c.cost, nop, gate.Priority(c.class), gate.Charge("tokens", c.tokens))
			if got := errors.Is(err, sluice.ErrCostExceedsCapacity); got != c.exceeds || !c.exceeds && err != nil {
				t.Errorf("shared %v: cost %d tokens %d class %s: %v, want cost_exceeds_capacity %v", shared, c.cost, c.tokens, c.class, err, c.exceeds)
			}
		}
		if s := g.Stats(); s.RejectedCost != 2 {
			t.Errorf("shared %v: %d rejected for their cost, want 2 (%+v)", shared, s.RejectedCost, s)
		}
	}
}
