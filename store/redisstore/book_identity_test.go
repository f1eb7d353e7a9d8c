package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

// memstore and Redis book identically: the same delays, decisions and
// refund times on a random trace of bookings (several buckets per request,
// windows that must admit now, cancellations by Adjust).
func TestBookingsIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	ms := memstore.New(memstore.WithClock(clock))
	var specs []*store.Spec
	for _, l := range []bucket.Limit{{Capacity: 10, Rate: 10}, bucket.PerMinute(100), {Capacity: 7, Rate: 0.7}, {Capacity: 1_000_000, Rate: 1e6}} {
		sp, err := store.NewBucketSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, sp)
	}
	specs = append(specs, &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 50, Window: time.Second}})
	rng := rand.New(rand.NewPCG(21, 21))
	ctx := context.Background()
	booked := 0
	var last []store.Item
	classes := rand.New(rand.NewPCG(22, 22)) // priority classes' reserves (a stream of their own)
	reserves := []uint32{0, 0, 200_000, 500_000, 999_999}
	for step := range 3000 {
		clock.Advance(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
		var a, b []store.Item
		reserve := reserves[classes.IntN(len(reserves))]
		mw := []time.Duration{0, time.Millisecond, 300 * time.Millisecond, 2 * time.Second, time.Minute}[rng.IntN(5)]
		for j, sp := range specs {
			if rng.IntN(3) != 0 {
				continue
			}
			it := withinClass(store.Item{Key: fmt.Sprint("b", j), Spec: sp, Cost: rng.Int64N(min(sp.Capacity(), 12) + 1), MaxWait: mw, Reserve: reserve})
			a, b = append(a, it), append(b, it)
		}
		if len(a) == 0 {
			continue
		}
		if len(last) > 0 && rng.IntN(6) == 0 { // cancel the last booking
			var adj []store.Adjustment
			for _, it := range last {
				adj = append(adj, store.Adjustment{Key: it.Key, Spec: it.Spec, Delta: -it.Cost, RefundBefore: it.RefundBefore})
			}
			if err := ms.Adjust(ctx, adj); err != nil {
				t.Fatal(err)
			}
			if err := rs.Adjust(ctx, adj); err != nil {
				t.Fatal(err)
			}
			last = nil
		}
		ra, err := ms.Take(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := rs.Take(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if ra.Allowed != rb.Allowed || ra.Wait != rb.Wait {
			t.Fatalf("step %d: memstore %+v, redis %+v", step, ra, rb)
		}
		for i := range a {
			if a[i].Decision != b[i].Decision || a[i].Wait != b[i].Wait || a[i].RefundBefore != b[i].RefundBefore {
				t.Fatalf("step %d item %s cost %d wait %v: memstore %+v %v (%d), redis %+v %v (%d)", step, a[i].Key, a[i].Cost, mw,
					a[i].Decision, a[i].Wait, a[i].RefundBefore, b[i].Decision, b[i].Wait, b[i].RefundBefore)
			}
		}
		if ra.Allowed && ra.Wait > 0 {
			booked++
			last = a
		}
	}
	if booked < 100 {
		t.Fatalf("only %d bookings with a wait: the trace does not exercise booking", booked)
	}
	t.Logf("%d bookings with a wait", booked)
}
