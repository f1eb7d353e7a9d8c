// Tests of adaptive limits: feedback lowers a key's ceiling for every
// limiter sharing the store, checks are decided under it, it climbs back.

package limiter

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

func TestAdaptiveFeedback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := policy.Parse([]byte(`limits:
  - name: llm
    key: "key:{api_key}"
    capacity: 1
    refill_per_second: 100
    adaptive: {min_refill_per_second: 10, increase_per_second: 10}
  - name: plain
    key: "t:{api_key}"
    capacity: 1000
    refill_per_second: 1000
`))
		if err != nil {
			t.Fatal(err)
		}
		st := memstore.New()
		a, err := New(p, st)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(p, st) // a second instance on the same store
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		desc := map[string]string{"api_key": "k1"}
		fs, err := a.Feedback(ctx, desc, true, nil)
		if err != nil || len(fs) != 1 || !fs[0].Lowered || fs[0].AdaptiveRefill != 50 || fs[0].Key != "key:k1" {
			t.Fatalf("an overload halves the key's ceiling: %+v %v", fs, err)
		}
		if fs, _ := b.Feedback(ctx, desc, true, []string{"llm"}); fs[0].Lowered || fs[0].AdaptiveRefill != 50 {
			t.Fatalf("the other instance's overload within the cooldown does not lower again: %+v", fs)
		}
		if _, err := a.Feedback(ctx, desc, true, []string{"plain"}); !errors.Is(err, ErrUnknownLimit) {
			t.Fatalf("a limit that is not adaptive: %v", err)
		}
		if fs, _ := a.Feedback(ctx, map[string]string{"api_key": "k2"}, false, nil); fs[0].AdaptiveRefill != 100 {
			t.Fatalf("another key is untouched: %+v", fs)
		}
		// b's checks: the first reads the ceiling, then at most ~50 a second
		n := 0
		start := time.Now()
		for time.Since(start) < time.Second {
			r, err := b.Check(ctx, Request{Descriptors: desc, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				n++
				if r.Limits[0].Name == "llm" && r.Limits[0].AdaptiveRefill == 0 {
					t.Fatalf("the status shows the ceiling: %+v", r.Limits[0])
				}
			}
			time.Sleep(time.Millisecond)
		}
		if n < 45 || n > 60 {
			t.Fatalf("admitted %d in a second under a ceiling of 50 (+10/s)", n)
		}
		time.Sleep(10 * time.Second)
		r, _ := b.Check(ctx, Request{Descriptors: desc, Cost: 1})
		r, _ = b.Check(ctx, Request{Descriptors: desc, Cost: 1})
		if got := r.Limits[0].AdaptiveRefill; got != 100 {
			t.Fatalf("climbed back to the limit's refill: %v", got)
		}
	})
}
