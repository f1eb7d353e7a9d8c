// The wrapper and spec changes on a key (store.SpecConverter).

package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/memstore"
)

// opaque hides a store's SpecConverter.
type opaque struct{ store.Store }

// The wrapper converts specs when the shared store does, and decides an
// item under another spec than its key's usual one there: raising an
// exhausted bucket hands out nothing at once, though leases were held.
func TestLeaseConvertsSpecs(t *testing.T) {
	if lease.New(opaque{memstore.New()}).ConvertsSpecs() {
		t.Fatal("over a store that does not convert, the wrapper does not")
	}
	clk := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	s := lease.New(memstore.New(memstore.WithClock(clk)), lease.WithClock(clk))
	if !s.ConvertsSpecs() {
		t.Fatal("over memstore the wrapper converts")
	}
	p, err := store.NewBucketSpec(bucket.Limit{Capacity: 100, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	q, err := store.NewBucketSpec(bucket.Limit{Capacity: 1000, Rate: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := 0
	for range 200 {
		r, err := s.Take(ctx, []store.Item{{Key: "k", Spec: p, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			n++
		}
	}
	if n != 100 {
		t.Fatalf("%d of 200 admitted by a bucket of 100", n)
	}
	r, err := s.Take(ctx, []store.Item{{Key: "k", Spec: q, Base: p, Cost: 1}})
	if err != nil || r.Allowed {
		t.Fatalf("raised to 1000: an exhausted bucket admitted at once: %+v %v", r, err)
	}
}
