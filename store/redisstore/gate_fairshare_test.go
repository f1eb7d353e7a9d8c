package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// A shared gate's fair shares and classes on Redis and Redis Cluster
// (issue 28), two instances on one Redis, the script's manual clock
// (B=100, r=100/s, active_window 10 s): tenant A floods at 10x the
// refill as batch (reserve 0.2), B and C each send 20 % of it as
// interactive and batch: B and C are admitted every time, A takes the
// rest, the total at most B + r·t and at least 95 % of r·t.
func TestSharedGateFairShareOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T, opts ...redisstore.Option) *redisstore.Store
	}{
		{"single", func(t *testing.T, o ...redisstore.Option) *redisstore.Store { return open(t, o...) }},
		{"cluster", func(t *testing.T, o ...redisstore.Option) *redisstore.Store { return openCluster(t, o...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := sluice.NewManualClock(storetest.Epoch)
			pre := redisstore.WithPrefix(prefix())
			var gates [2]*gate.Gate
			for i := range gates {
				g, err := gate.New(gate.Config{Name: "provider", Limit: bucket.Limit{Capacity: 100, Rate: 100},
					Store:      tc.open(t, redisstore.WithScriptClock(clock), pre),
					Priorities: []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 200_000}},
					FairShare:  gate.FairShare{ActiveWindow: 10 * time.Second}})
				if err != nil {
					t.Fatal(err)
				}
				gates[i] = g
			}
			ctx := context.Background()
			const ms = 3000 // 3 s
			asked, got := map[string]int{}, map[string]int{}
			for step := range ms {
				clock.Advance(time.Millisecond)
				calls := [][2]string{{"A", "batch"}}
				if step%50 == 0 {
					calls = append(calls, [2]string{"B", "interactive"}, [2]string{"C", "batch"})
				}
				for i, c := range calls {
					asked[c[0]]++
					err := gates[(step+i)%2].Do(ctx, 1, func(context.Context) error { return nil }, gate.Tenant(c[0]), gate.Priority(c[1]))
					switch {
					case err == nil:
						got[c[0]]++
					case !errors.Is(err, sluice.ErrQueueFull):
						t.Fatal(err)
					}
				}
			}
			total, bound, refill := got["A"]+got["B"]+got["C"], 100+100*ms/1000, 100*ms/1000
			t.Logf("A %d/%d, B %d/%d, C %d/%d, total %d (B + r·t = %d)", got["A"], asked["A"], got["B"], asked["B"], got["C"], asked["C"], total, bound)
			if got["B"] != asked["B"] || got["C"] != asked["C"] {
				t.Errorf("B and C: admitted %d of %d and %d of %d, want all", got["B"], asked["B"], got["C"], asked["C"])
			}
			if total > bound || total < refill*95/100 {
				t.Errorf("admitted %d, want at least 95 %% of r·t = %d and at most B + r·t = %d", total, refill, bound)
			}
		})
	}
}
