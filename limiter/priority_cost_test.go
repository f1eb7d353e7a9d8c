package limiter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// tinySrc has limits a class with reserve 0.5 sees as zero (a bucket of
// capacity 1, a window and a quota of 1, one in-flight slot) and a bucket
// of 10 it sees as 5, and a shadow bucket of 1.
const tinySrc = `
priorities:
  - name: interactive
  - name: batch
    reserve: 0.5
    max_queue_ms: 0
limits:
  - {name: bucket1, key: "b:{b}", capacity: 1, refill_per_second: 1}
  - {name: window1, key: "w:{w}", algorithm: sliding_window, limit: 1, window: 1m}
  - {name: quota1, key: "q:{q}", algorithm: quota, limit: 1, period: day}
  - {name: slot1, key: "s:{s}", max_in_flight: 1, lease_ttl: 30s}
  - {name: bucket10, key: "t:{t}", capacity: 10, refill_per_second: 1}
  - {name: shadow1, key: "x:{x}", capacity: 1, refill_per_second: 1, shadow: true}
`

// A cost above what its class may ever take of a limit (floor of the
// capacity·(1 − reserve) in the limit's units; one slot of an in-flight
// cap) is a *limiter.CostError naming the limit and the class's capacity,
// sluice.ErrCostExceedsCapacity (HTTP 422 cost_exceeds_capacity), nothing
// taken: never a refusal whose retry hint comes true never (it was one of
// 500 ms on the bucket and 0 on the window and quota). A cost within the
// class's view is decided as ever; a shadow limit is peeked.
func TestPriorityCostExceedsClassCapacity(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	l := limiterOver(t, tinySrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	for _, tc := range []struct {
		desc     string
		cost     int64
		class    string
		limit    string
		capacity int64 // the class's, for a CostError; -1: decided
	}{
		{"b", 1, "batch", "bucket1", 0}, {"w", 1, "batch", "window1", 0}, {"q", 1, "batch", "quota1", 0}, {"s", 1, "batch", "slot1", 0},
		{"t", 6, "batch", "bucket10", 5}, {"t", 5, "batch", "", -1}, {"t", 10, "interactive", "", -1},
		{"b", 1, "interactive", "", -1}, {"w", 1, "", "", -1}, {"x", 1, "batch", "", -1},
	} {
		req := limiter.Request{Descriptors: map[string]string{tc.desc: "k"}, Cost: tc.cost, Priority: tc.class}
		_, err := l.Check(ctx, req)
		_, manyErr := l.CheckMany(ctx, []limiter.Request{req})
		for _, err := range []error{err, manyErr} {
			var ce *limiter.CostError
			switch {
			case tc.capacity < 0 && err != nil:
				t.Errorf("%s cost %d class %q: %v, want a decision", tc.desc, tc.cost, tc.class, err)
			case tc.capacity >= 0 && (!errors.As(err, &ce) || !errors.Is(err, sluice.ErrCostExceedsCapacity) || ce.Capacity != tc.capacity || ce.Cost != tc.cost || ce.Limit != tc.limit):
				t.Errorf("%s cost %d class %q: %v (%+v), want a CostError of %s, capacity %d", tc.desc, tc.cost, tc.class, err, ce, tc.limit, tc.capacity)
			}
		}
	}
	// The errors took nothing: what batch could not take is there whole
	// for interactive.
	for _, d := range []string{"b", "w", "q", "s"} {
		req := limiter.Request{Descriptors: map[string]string{d: "k2"}, Cost: 1, Priority: "batch"}
		if _, err := l.Check(ctx, req); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			t.Fatalf("%s: batch: %v", d, err)
		}
		req.Priority = "interactive"
		if r := check(t, l, req); !r.Allowed {
			t.Errorf("%s: interactive after batch's error: %+v", d, r)
		}
	}
}
