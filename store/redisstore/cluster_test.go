package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// cluster is a real 3-master Redis Cluster, started once per test binary
// by the first test that needs it, stopped by TestMain.
var cluster = redistest.SharedCluster{N: 3}

// openCluster returns a store on the cluster.
func openCluster(t *testing.T, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	u := "redis+cluster://" + strings.Join(cluster.Addrs(t), ",")
	s, err := redisstore.Open(u, append([]redisstore.Option{redisstore.WithPrefix(prefix()), redisstore.WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestClusterConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store {
		return openCluster(t, redisstore.WithScriptClock(c))
	})
}

// A request whose keys span hash slots (and so nodes) is all-or-nothing:
// refused by one slot, it leaves every other bucket, window and slot set
// exactly as it was.
func TestClusterCrossSlotRefusalLeavesNoTrace(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	s := openCluster(t, redisstore.WithScriptClock(c))
	ctx := context.Background()
	bk := mustSpec(t, 100, 1)
	win := &store.Spec{Kind: store.SlidingWindow, Window: windowLimit(50, time.Minute)}
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 3, SlotTTL: time.Minute}
	tight := mustSpec(t, 5, 0.001)
	keys := []string{"global", "tenant:acme", "tools:acme", "user:bob"}
	slots := map[uint16]bool{}
	for i, k := range keys {
		kind := []store.Kind{store.TokenBucket, store.SlidingWindow, store.Concurrency, store.TokenBucket}[i]
		slots[redisstore.HashSlot(s.Key(kind, k))] = true
	}
	if len(slots) < 3 {
		t.Fatalf("test keys share slots: %v", slots)
	}
	items := func(cost int64) []store.Item {
		return []store.Item{{Key: "global", Spec: bk, Cost: 10}, {Key: "tenant:acme", Spec: win, Cost: 10},
			{Key: "tools:acme", Spec: conc, Cost: 1}, {Key: "user:bob", Spec: tight, Cost: cost}}
	}
	// Drain user:bob so that it refuses.
	if r, err := s.Take(ctx, []store.Item{{Key: "user:bob", Spec: tight, Cost: 5}}); err != nil || !r.Allowed {
		t.Fatalf("drain: %+v %v", r, err)
	}
	for range 20 {
		r, err := s.Take(ctx, items(1))
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			t.Fatal("admitted although user:bob is empty")
		}
	}
	peek := []store.Item{{Key: "global", Spec: bk}, {Key: "tenant:acme", Spec: win}, {Key: "tools:acme", Spec: conc}}
	if _, err := s.Take(ctx, peek); err != nil {
		t.Fatal(err)
	}
	if peek[0].Decision.Remaining != 100 || peek[1].Decision.Remaining != 50 || peek[2].Decision.Remaining != 3 {
		t.Fatalf("refused cross-slot requests left a trace: %+v", peek)
	}
	// The same request admitted when every slot admits.
	c.Advance(2000 * time.Second)
	its := items(1)
	r, err := s.Take(ctx, its)
	if err != nil || !r.Allowed || r.Slots.ID == "" {
		t.Fatalf("admit: %+v %v", r, err)
	}
	if its[0].Decision.Remaining != 90 || its[1].Decision.Remaining != 40 || its[2].Decision.Remaining != 2 {
		t.Fatalf("admitted decisions: %+v", its)
	}
}
