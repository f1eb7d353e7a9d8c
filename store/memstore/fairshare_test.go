// Fair shares in memory: the conformance cases, the sets' bounds and
// freeing, and concurrent requests under -race.

package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestFairShareConformance(t *testing.T) {
	storetest.RunFairShare(t, func(t *testing.T, c sluice.Clock) store.Store { return memstore.New(memstore.WithClock(c)) })
}

// A refused request's share refusal starts no penalty box; the bucket's
// own refusal does.
func TestFairShareNoPenalty(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c))
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.PerSecond(10), BlockFor: time.Minute,
		FairShare: store.FairShare{ActiveWindow: 10 * time.Second, MaxTenants: 10}})
	if err != nil {
		t.Fatal(err)
	}
	take := func(tenant string, cost int64) store.Item {
		items := []store.Item{{Key: "k", Spec: sp, Cost: cost, Tenant: tenant, Weight: 1}}
		if _, err := s.Take(context.Background(), items); err != nil {
			t.Fatal(err)
		}
		return items[0]
	}
	take("b", 1)
	take("a", 5)
	take("a", 1)
	take("a", 1)
	if it := take("a", 1); it.Decision.Allowed || it.Decision.RetryAfter != 100*time.Millisecond {
		t.Fatalf("share refusal: %+v", it.Decision)
	}
	c.Advance(100 * time.Millisecond)
	if it := take("a", 1); !it.Decision.Allowed {
		t.Fatalf("a share refusal blocked the key: %+v", it.Decision)
	}
}

// Sets are freed once every holder has expired; a set holds at most
// MaxTenants+1 holders however many tenants ask.
func TestFairShareSetsBounded(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c))
	sp := storetest.ShareSpec(t, 1000, 10, time.Second, 5)
	for i := range 200 {
		items := []store.Item{{Key: fmt.Sprint("k", i%20), Spec: sp, Cost: 1, Tenant: fmt.Sprint("t", i), Weight: 1}}
		if _, err := s.Take(context.Background(), items); err != nil {
			t.Fatal(err)
		}
	}
	if n := memstore.FairHolders(s); n > 20*6 || n < 20 {
		t.Fatalf("%d holders in 20 sets of max_tenants 5", n)
	}
	c.Advance(2 * time.Second)
	for i := range 1000 { // a decision in a shard frees its expired sets (1000 keys reach every shard)
		items := []store.Item{{Key: fmt.Sprint("other", i), Spec: sp, Cost: 1, Tenant: "x"}}
		if _, err := s.Take(context.Background(), items); err != nil {
			t.Fatal(err)
		}
	}
	if n := memstore.FairSets(s); n != 1000 {
		t.Fatalf("%d sets held after the first 20's holders expired, want the 1000 live", n)
	}
}

// Concurrent fair-share requests on a few keys (run with -race): the
// bucket's bound holds, B + r·t with a manual clock that does not move.
func TestFairShareConcurrent(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c))
	sp := storetest.ShareSpec(t, 100, 10, time.Second, 3)
	other := storetest.ShareSpec(t, 50, 10, time.Second, 3)
	var mu sync.Mutex
	admitted := map[string]int64{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				items := []store.Item{
					{Key: "shared", Spec: sp, Cost: 1, Tenant: fmt.Sprint("t", (g+i)%5), Weight: uint32(g % 3)},
					{Key: fmt.Sprint("o", i%2), Spec: other, Cost: 1, Tenant: fmt.Sprint("t", g)},
				}
				if i%3 == 0 {
					items = items[:1]
				}
				r, err := s.Take(context.Background(), items)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					mu.Lock()
					for _, it := range items {
						admitted[it.Key]++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted["shared"] > 100 || admitted["o0"] > 50 || admitted["o1"] > 50 {
		t.Fatalf("over the bucket's bound: %v", admitted)
	}
	if admitted["shared"] < 50 {
		t.Fatalf("the shared bucket admitted only %d of 100 (half uncontended)", admitted["shared"])
	}
}
