package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/memstore"
)

// slowStore holds every Take of a key in hold until release is closed.
type slowStore struct {
	store.Store
	hold    map[string]bool
	entered chan string
	release chan struct{}
}

func (s *slowStore) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	for _, it := range items {
		if s.hold[it.Key] {
			s.entered <- it.Key
			<-s.release
		}
	}
	return s.Store.Take(ctx, items)
}

// No lock is held across a round trip: while the shared store is slow to
// answer a fetch for one key, requests for other keys (cold ones, on every
// lease shard) are decided, and requests for the same key wait for that
// fetch and then spend what it brought, without a round trip of their own.
func TestNoLockAcrossRoundTrips(t *testing.T) {
	inner := &slowStore{Store: memstore.New(), hold: map[string]bool{}, entered: make(chan string, 8), release: make(chan struct{})}
	s := lease.New(inner, lease.WithTarget(time.Second))
	defer s.Close()
	hot := spec(t, 100_000, 100_000)
	for range 2000 { // warm "hot" so that its next fetch takes a batch
		if r, err := s.Take(context.Background(), []store.Item{{Key: "hot", Spec: hot, Cost: 1}}); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	// Spend the lease down so that the next request fetches.
	leased := s.Stats().Leased
	if leased < 2 {
		t.Fatalf("no batch leased: %d", leased)
	}
	if r, err := s.Take(context.Background(), []store.Item{{Key: "hot", Spec: hot, Cost: leased}}); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	inner.hold["hot"] = true
	done := make(chan error, 1)
	go func() {
		_, err := s.Take(context.Background(), []store.Item{{Key: "hot", Spec: hot, Cost: 1}})
		done <- err
	}()
	<-inner.entered // the fetch is in the shared store now, and stays there
	cold := spec(t, 10, 1)
	coldDone := make(chan error, 1)
	go func() {
		for i := range 64 { // keys on every one of the 16 shards
			r, err := s.Take(context.Background(), []store.Item{{Key: fmt.Sprint("cold", i), Spec: cold, Cost: 1}})
			if err == nil && !r.Allowed {
				err = fmt.Errorf("cold key %d refused: %+v", i, r)
			}
			if err != nil {
				coldDone <- err
				return
			}
		}
		coldDone <- nil
	}()
	select {
	case err := <-coldDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(inner.release) // let the held fetch go, so that the test can end
		t.Fatal("cold keys waited on a fetch for another key: a lock is held across the round trip")
	}
	// Others on the hot key wait for the fetch (no second fetch), then spend.
	before := s.Stats().RoundTrips
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := s.Take(context.Background(), []store.Item{{Key: "hot", Spec: hot, Cost: 1}}); err != nil || !r.Allowed {
				t.Error(r, err)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	inner.hold["hot"] = false
	close(inner.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if trips := s.Stats().RoundTrips - before; trips != 0 {
		t.Fatalf("the waiters made %d round trips of their own", trips)
	}
}
