// A priority class's cost above what it may ever take (store.Spec.ClassCapacity)
// on memstore, Redis and Redis Cluster alike, and the trace helper that keeps
// random traces' costs within it.

package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// withinClass is it with its cost cut to what its class may ever take
// (store.Spec.ClassCapacity; an in-flight cap's item needs one slot), so
// that a random trace's items are decided, not refused as invalid.
func withinClass(it store.Item) store.Item {
	n := it.Spec.ClassCapacity(it.Reserve)
	if it.Spec.HoldsSlots() {
		if n == 0 {
			it.Cost = 0
		}
		return it
	}
	it.Cost = min(it.Cost, n)
	return it
}

// A class whose view of a limit is below the request's cost (capacity 1
// with reserve 0.5, a window or quota of 1, one slot) can never be
// admitted: every store refuses the item as invalid with
// sluice.ErrCostExceedsCapacity, as a cost above the capacity, taking
// nothing, instead of a refusal whose retry hint comes true never; a cost
// within the view is decided as before.
func TestClassCostExceedsCapacity(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	spec := func(l store.Limit) *store.Spec {
		sp, err := store.NewSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	one := spec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1, Rate: 1}})
	ten := spec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 10, Rate: 1}})
	win := spec(store.Limit{Kind: store.SlidingWindow, Window: windowLimit(1, time.Minute)})
	quo := spec(store.Limit{Kind: store.Quota, Quota: quota.Limit{Limit: 1, Period: quota.Day}})
	slots := &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: time.Minute}
	stores := map[string]store.Store{"memstore": memstore.New(memstore.WithClock(clock)), "redis": open(t), "cluster": openCluster(t)}
	ctx := context.Background()
	for name, s := range stores {
		for _, c := range []struct {
			spec    *store.Spec
			cost    int64
			reserve uint32
			invalid bool
		}{
			{one, 1, 500_000, true}, {one, 1, 0, false}, {win, 1, 500_000, true}, {win, 1, 0, false},
			{quo, 1, 500_000, true}, {quo, 1, 0, false}, {slots, 1, 500_000, true}, {ten, 6, 500_000, true}, {ten, 5, 500_000, false}, {ten, 0, 999_999, false},
		} {
			items := []store.Item{{Key: "k" + c.spec.Kind.String(), Spec: c.spec, Cost: c.cost, Reserve: c.reserve}}
			if c.spec == ten {
				items[0].Key = "ten"
			}
			_, err := s.Take(ctx, items)
			if got := errors.Is(err, sluice.ErrCostExceedsCapacity) && errors.Is(err, store.ErrInvalidItem); got != c.invalid || !c.invalid && err != nil {
				t.Errorf("%s: %s capacity %d, cost %d, reserve %d ppm: %v, want cost_exceeds_capacity %v", name, c.spec.Kind, c.spec.Capacity(), c.cost, c.reserve, err, c.invalid)
			}
		}
	}
}
