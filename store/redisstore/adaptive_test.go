// Adaptive ceilings on Redis and Redis Cluster: a shared gate's and an
// adaptive limit's ceiling, lowered through one store, read through
// another (another instance) on the same Redis.

package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redisstore"
)

func TestAdaptiveShared(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(*testing.T, string) *redisstore.Store
	}{
		{"redis", func(t *testing.T, p string) *redisstore.Store { return openPrefix(t, p) }},
		{"cluster", openClusterPrefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := prefix()
			ctx := context.Background()
			nop := func(context.Context) error { return nil }
			mk := func() *gate.Gate {
				g, err := gate.New(gate.Config{Name: "tool", Limit: bucket.Limit{Capacity: 5, Rate: 100}, Store: tc.open(t, p),
					MaxQueue: 10, MaxWait: time.Second, Adaptive: &gate.Adaptive{Min: 10, Increase: 0.001, Cooldown: time.Minute}})
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			a, b := mk(), mk()
			if !a.Overloaded() || a.Refill() > 50.01 || a.Refill() < 49.9 {
				t.Fatalf("a's overload halves the shared ceiling: %v", a.Refill())
			}
			if b.Overloaded() {
				t.Fatal("b's overload within the fleet's cooldown lowers nothing")
			}
			if err := b.Do(ctx, 1, nop); err != nil {
				t.Fatal(err)
			}
			if r := b.Refill(); r > 50.01 || r < 49.9 {
				t.Fatalf("b decides under the ceiling a lowered: %v", r)
			}

			pol, err := policy.Parse([]byte(`limits:
  - name: llm
    key: "key:{api_key}"
    capacity: 10
    refill_per_second: 100
    adaptive: {min_refill_per_second: 10, increase_per_second: 0.001, cooldown: 1m}
`))
			if err != nil {
				t.Fatal(err)
			}
			la, err := limiter.New(pol, tc.open(t, p))
			if err != nil {
				t.Fatal(err)
			}
			lb, err := limiter.New(pol, tc.open(t, p))
			if err != nil {
				t.Fatal(err)
			}
			desc := map[string]string{"api_key": "k"}
			fs, err := la.Feedback(ctx, desc, true, nil)
			if err != nil || !fs[0].Lowered || fs[0].AdaptiveRefill != 50 {
				t.Fatalf("feedback: %+v %v", fs, err)
			}
			lb.Check(ctx, limiter.Request{Descriptors: desc}) //nolint:errcheck // (reads the ceiling)
			r, err := lb.Check(ctx, limiter.Request{Descriptors: desc})
			if err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			if got := r.Limits[0].AdaptiveRefill; got < 49.9 || got > 50.01 {
				t.Fatalf("the other instance decides under the lowered ceiling: %v", got)
			}
		})
	}
}
