package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redisstore"
)

var _ store.Once = (*redisstore.Store)(nil)

// Claim: of many claims of one key from two stores on one Redis, one
// wins; the claim expires after its ttl.
func TestOnceClaim(t *testing.T) {
	p := prefix()
	a, b := openPrefix(t, p), openPrefix(t, p)
	var won atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			ok, err := s.Claim(context.Background(), "alert:x:0.8", 300*time.Millisecond)
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d claims won, want 1", won.Load())
	}
	time.Sleep(400 * time.Millisecond)
	if ok, err := b.Claim(context.Background(), "alert:x:0.8", time.Second); !ok || err != nil {
		t.Fatalf("after the ttl: %v %v", ok, err)
	}
}

// Claim on a Redis Cluster: one winner of two stores' claims.
func TestOnceClaimCluster(t *testing.T) {
	p := prefix()
	a, b := openClusterPrefix(t, p), openClusterPrefix(t, p)
	okA, errA := a.Claim(context.Background(), "alert:y:1", time.Minute)
	okB, errB := b.Claim(context.Background(), "alert:y:1", time.Minute)
	if errA != nil || errB != nil || !okA || okB {
		t.Fatalf("%v %v, %v %v: want the first claim alone to win", okA, errA, okB, errB)
	}
}
