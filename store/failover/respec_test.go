// The wrapper and spec changes on a key (store.SpecConverter).

package failover_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/memstore"
)

// hidden hides a store's SpecConverter.
type hidden struct{ store.Store }

// The wrapper converts specs when its primary does.
func TestFailoverConvertsSpecs(t *testing.T) {
	for _, c := range []struct {
		primary store.Store
		want    bool
	}{{memstore.New(), true}, {hidden{memstore.New()}, false}} {
		s, err := failover.New(failover.Config{Primary: c.primary, Mode: failover.Local})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.ConvertsSpecs(); got != c.want {
			t.Fatalf("over %T: ConvertsSpecs %v, want %v", c.primary, got, c.want)
		}
		s.Close()
	}
	s, err := failover.New(failover.Config{Primary: memstore.New(), Mode: failover.Local})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 1})
	q, _ := store.NewBucketSpec(bucket.Limit{Capacity: 100, Rate: 10})
	ctx := context.Background()
	for range 10 {
		s.Take(ctx, []store.Item{{Key: "k", Spec: p, Cost: 1}})
	}
	r, err := s.Take(ctx, []store.Item{{Key: "k", Spec: q, Base: p, Cost: 1}})
	if err != nil || r.Allowed {
		t.Fatalf("raised to 100: an exhausted bucket admitted at once: %+v %v", r, err)
	}
}
