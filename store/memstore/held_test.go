// TakeHeldAt against TakeBorrowedAt: the same decisions on held keys, across rebasing, full buckets and a clock that steps back.

package memstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestTakeHeldMatchesTakeBorrowed runs random requests of 1 to 3 token
// buckets through two stores on one manual clock, one deciding by
// TakeHeldAt (TakeBorrowedAt when it declines, as the limiter's fast path
// does) and one by TakeBorrowedAt alone, and requires identical Allowed and
// Decisions. The clock jumps past a limit's MaxElapsed (its states
// rebase), idles until buckets are full, and steps back before
// states' origins; costs run up to the capacities, so requests are refused;
// and some items are under an override's spec, so that shards hold
// respecs (TakeHeldAt then declines, unlocking what it locked).
func TestTakeHeldMatchesTakeBorrowed(t *testing.T) {
	t.Parallel()
	limits := []bucket.Limit{{Capacity: 1e9, Rate: 1e9}, {Capacity: 3, Rate: 1}, {Capacity: 10, Rate: 10.0 / 60}, {Capacity: 5, Rate: 0.7}, {Capacity: 1000, Rate: 1e6},
		{Capacity: 1000, Rate: math.Pi * 1e6}, {Capacity: 4, Rate: 1.0 / 3}} // (binary units; the first rebases past 85 s)
	specs := make([]*store.Spec, len(limits))
	for i, l := range limits {
		sp, err := store.NewBucketSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		specs[i] = sp
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(27, 2))
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	held, ref := memstore.New(memstore.WithClock(clock)), memstore.New(memstore.WithClock(clock))
	memstore.ShareSeed(ref, held) // (keys placed and swept alike: the same keys evicted)
	heldN := 0
	for step := range 20000 {
		switch r := rng.IntN(100); {
		case r < 60:
			clock.Advance(time.Duration(rng.IntN(30)) * time.Millisecond)
		case r < 70:
			clock.Advance(time.Duration(1+rng.IntN(200)) * time.Second) // past 85 s: rebasing at pi*1e6/s
		case r < 73:
			clock.Advance(-time.Duration(rng.IntN(3000)) * time.Millisecond) // before an origin, at times
		case r < 74:
			clock.Advance(time.Hour) // every bucket full
		}
		ks := rng.Perm(len(limits))[:1+rng.IntN(3)] // distinct limits: distinct keys
		a := make([]store.Item, len(ks))
		for j, k := range ks {
			a[j] = store.Item{Key: fmt.Sprintf("%d:%d", k, rng.IntN(4)), Spec: specs[k], Cost: rng.Int64N(limits[k].Capacity + 1)}
			if rng.IntN(3) == 0 {
				a[j].Cost = min(a[j].Cost, 1+rng.Int64N(2))
			}
			if rng.IntN(40) == 0 { // under an override's spec: the shard keeps a respec (TakeHeldAt declines it)
				o := (k + 1) % len(specs)
				a[j].Base, a[j].Spec, a[j].Cost = specs[k], specs[o], min(a[j].Cost, limits[o].Capacity)
			}
		}
		b := append([]store.Item(nil), a...)
		allowed, ok := held.TakeHeldAt(a, nil)
		if ok {
			heldN++
		} else {
			r, err := held.TakeBorrowedAt(ctx, a, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			allowed = r.Allowed
		}
		r, err := ref.TakeBorrowedAt(ctx, b, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if allowed != r.Allowed {
			t.Fatalf("step %d (held %v): allowed %v, TakeBorrowedAt %v", step, ok, allowed, r.Allowed)
		}
		for j := range a {
			if a[j].Decision != b[j].Decision || a[j].Wait != b[j].Wait {
				t.Fatalf("step %d (held %v) item %d (%s cost %d): %+v wait %v, TakeBorrowedAt %+v wait %v",
					step, ok, j, a[j].Key, a[j].Cost, a[j].Decision, a[j].Wait, b[j].Decision, b[j].Wait)
			}
		}
	}
	if heldN < 15000 {
		t.Fatalf("TakeHeldAt decided only %d of 20000", heldN)
	}
}
