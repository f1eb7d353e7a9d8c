package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redisstore"
)

// A gate shared through Redis (and Redis Cluster): two clients (two
// workers) hammering one name admit exactly the budget, never more than
// MaxInFlight at once across both, and a pause seen by one stops the
// other.
func TestSharedGateOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T, opts ...redisstore.Option) *redisstore.Store
	}{
		{"single", func(t *testing.T, o ...redisstore.Option) *redisstore.Store { return open(t, o...) }},
		{"cluster", func(t *testing.T, o ...redisstore.Option) *redisstore.Store { return openCluster(t, o...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two workers: two clients on the same keys.
			p := redisstore.WithPrefix(prefix())
			sharedGateOn(t, []store.Store{tc.open(t, p), tc.open(t, p)})
		})
	}
}

func sharedGateOn(t *testing.T, stores []store.Store) {
	cfg := gate.Config{Name: "provider", Limit: bucket.Limit{Capacity: 40, Rate: 0.001}, MaxInFlight: 3,
		MaxQueue: 100, MaxWait: 300 * time.Millisecond, SlotTTL: 5 * time.Second}
	var gates []*gate.Gate
	for _, st := range stores {
		cfg.Store = st
		g, err := gate.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		gates = append(gates, g)
	}
	var admitted, inFlight, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		g := gates[i%len(gates)]
		wg.Go(func() {
			for range 5 {
				err := g.Do(context.Background(), 1, func(context.Context) error {
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(2 * time.Millisecond)
					inFlight.Add(-1)
					return nil
				})
				if err == nil {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// 40 tokens, refilling one per 1000 s: 40 calls pass (a few
	// waiters may not get a slot within MaxWait on a loaded machine, so
	// at least 30), never 41.
	if n := admitted.Load(); n > 40 || n < 30 {
		t.Fatalf("rule: gates sharing a name through Redis admit the budget once (40 of 80 calls): %d", n)
	}
	if p := peak.Load(); p > 3 {
		t.Fatalf("rule: MaxInFlight 3 holds across every gate of the name: %d at once", p)
	}
	// A pause seen by one gate stops the other.
	cfg.Limit, cfg.MaxWait, cfg.Name = bucket.PerSecond(1000), time.Second, "paused"
	cfg.Store = stores[0]
	p0, _ := gate.New(cfg)
	cfg.Store = stores[len(stores)-1]
	p1, _ := gate.New(cfg)
	p0.Pause(400 * time.Millisecond)
	start := time.Now()
	if err := p1.Do(context.Background(), 1, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 350*time.Millisecond {
		t.Fatalf("rule: a pause through Redis reaches every gate of the name: admitted after %v of a 400 ms pause", d)
	}
}
