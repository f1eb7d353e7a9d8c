package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// A caller whose context has ended while its request was queued behind
// busy script calls gets an error and takes nothing; one already in a
// script call gets its decision. Either way the tokens taken are exactly
// those of the requests reported admitted.
func TestAbandonedQueuedTakeTakesNothingUnreported(t *testing.T) {
	s := open(t)
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 1000000, Rate: 0.001})
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	// alone (not queued): nothing is sent
	if _, err := s.Take(dead, []store.Item{{Key: "solo", Spec: sp, Cost: 1}}); err == nil {
		t.Fatal("no error")
	}
	var admitted, failedDead atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for range 100 {
				ctx := context.Background()
				if g%2 == 1 {
					ctx = dead
				}
				r, err := s.Take(ctx, []store.Item{{Key: "hot", Spec: sp, Cost: 1}})
				switch {
				case err != nil && g%2 == 1:
					failedDead.Add(1)
				case err != nil:
					t.Error(err)
				case r.Allowed:
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // let the queue drain
	remaining := func(key string) int64 {
		peek := []store.Item{{Key: key, Spec: sp}}
		if _, err := s.Take(context.Background(), peek); err != nil {
			t.Fatal(err)
		}
		return peek[0].Decision.Remaining
	}
	if r := remaining("solo"); r != 1000000 {
		t.Fatalf("solo: %d", r)
	}
	taken := 1000000 - remaining("hot")
	t.Logf("admitted %d, failed with a dead context %d, tokens taken %d", admitted.Load(), failedDead.Load(), taken)
	if taken != admitted.Load() {
		t.Fatalf("%d tokens taken for %d admitted requests", taken, admitted.Load())
	}
}
func TestAbandonedTakeLeavesTheItemsAlone(t *testing.T) {
	s := open(t)
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 1000000, Rate: 0.001})
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			items := make([]store.Item, 1)
			for range 200 {
				ctx := context.Background()
				if g%2 == 1 {
					ctx = dead
				}
				items[0] = store.Item{Key: "hot", Spec: sp, Cost: 1} // reuse, as a pooled scratch does
				s.Take(ctx, items)
			}
		})
	}
	wg.Wait()
}
