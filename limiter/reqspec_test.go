// Tests of Request.Spec: a per-request limit deciding the limits that apply.

package limiter_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// A request's Spec decides its limits in place of their parameters and
// overrides (here a deny override is not consulted); statuses show it,
// and a cost above its capacity is a CostError.
func TestRequestSpec(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l, _ := overLimiter(t, memstore.New(memstore.WithClock(c)), []overrides.Override{
		{Name: "api", Match: map[string]string{"tenant": "acme"}, Params: overrides.Params{Deny: true}}})
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 2, Rate: 2.0 / 60})
	if err != nil {
		t.Fatal(err)
	}
	d := map[string]string{"tenant": "acme"}
	for i := range 3 {
		res := check(t, l, limiter.Request{Descriptors: d, Cost: 1, Spec: sp})
		api := statusOf(t, res, "api")
		if res.Allowed != (i < 2) || api.Capacity != 2 || api.RefillPerSecond != 2.0/60 || api.Denied || api.Override != nil {
			t.Fatalf("request %d: the request's spec decides (capacity 2): %+v", i, res)
		}
	}
	if res := check(t, l, limiter.Request{Descriptors: d, Cost: 1}); !statusOf(t, res, "api").Denied {
		t.Fatalf("without a spec the override applies: %+v", res)
	}
	var ce *limiter.CostError
	if _, err := l.Check(t.Context(), limiter.Request{Descriptors: d, Cost: 3, Spec: sp}); !errors.As(err, &ce) || ce.Capacity != 2 {
		t.Fatalf("a cost above the spec's capacity: %v", err)
	}
}
