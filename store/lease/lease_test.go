package lease_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/redisstore"
)

// srv is the tests' redis-server, started by the first test that asks.
var srv redistest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

var seq atomic.Int64

// shared opens a Redis store with a prefix of the test's own (instances of
// one test pass the same prefix).
func shared(t *testing.T, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open("redis://"+srv.Addr(t), redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newPrefix() string { return fmt.Sprintf("lease%d-%d:", time.Now().UnixNano(), seq.Add(1)) }

func spec(t *testing.T, capacity int64, rate float64) *store.Spec {
	t.Helper()
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: capacity, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// skewed is a clock shifted from the machine's.
type skewed time.Duration

func (s skewed) Now() time.Time { return time.Now().Add(time.Duration(s)) }

// peek reads the shared bucket's remaining tokens.
func peek(t *testing.T, s store.Store, key string, sp *store.Spec) int64 {
	t.Helper()
	items := []store.Item{{Key: key, Spec: sp}}
	if _, err := s.Take(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	return items[0].Decision.Remaining
}

// Several leasing instances on one Redis, with clocks skewed by up to an
// hour, hammering one key: together they admit at most B + r*t (every
// token spent locally was taken from Redis first, on Redis' clock), and
// at least B + r*t minus what the leases can strand.
func TestInstancesNeverOverAdmit(t *testing.T) {
	const B, r, instances = 200, 2000.0, 4
	sp := spec(t, B, r)
	prefix := newPrefix()
	var stores []*lease.Store
	for i := range instances {
		skew := skewed(time.Duration(i-instances/2) * 30 * time.Minute)
		stores = append(stores, lease.New(shared(t, prefix), lease.WithClock(skew), lease.WithTTL(200*time.Millisecond)))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	until := start.Add(2 * time.Second)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%instances]
			for time.Now().Before(until) {
				items := []store.Item{{Key: "hot", Spec: sp, Cost: 1}}
				res, err := s.Take(context.Background(), items)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var trips, decisions uint64
	var leased int64
	for _, s := range stores {
		st := s.Stats()
		trips += st.RoundTrips
		decisions += st.Decisions
		leased += st.Leased
	}
	bound := B + r*elapsed.Seconds()
	strandMax := float64(instances * B / 4)
	t.Logf("admitted %d of B + r*t = %.0f; %d decisions, %d round trips (%.1f decisions per trip); %d tokens leased at the end",
		admitted.Load(), bound, decisions, trips, float64(decisions)/float64(trips), leased)
	if float64(admitted.Load()) > bound {
		t.Fatalf("over-admitted: %d > %.1f", admitted.Load(), bound)
	}
	if float64(admitted.Load()) < bound-strandMax-r*0.05 {
		t.Fatalf("under-admitted beyond the stranding bound: %d < %.1f - %.0f", admitted.Load(), bound, strandMax)
	}
	for _, s := range stores {
		s.Close()
	}
}

// A hot key on one instance needs at least 10x fewer round trips than
// decisions; a cold key takes no batch (nothing stranded).
func TestRoundTrips(t *testing.T) {
	prefix := newPrefix()
	s := lease.New(shared(t, prefix))
	defer s.Close()
	hot := spec(t, 1_000_000, 1_000_000)
	for range 20_000 {
		if r, err := s.Take(context.Background(), []store.Item{{Key: "hot", Spec: hot, Cost: 1}}); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	st := s.Stats()
	if ratio := float64(st.Decisions) / float64(st.RoundTrips); ratio < 10 {
		t.Fatalf("hot key: %d decisions, %d round trips (%.1f per trip)", st.Decisions, st.RoundTrips, ratio)
	}
	cold := spec(t, 100, 1)
	before := s.Stats()
	for i := range 5 {
		if r, err := s.Take(context.Background(), []store.Item{{Key: fmt.Sprint("cold", i), Spec: cold, Cost: 1}}); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	after := s.Stats()
	if after.RoundTrips-before.RoundTrips != 5 || after.Leased != before.Leased {
		t.Fatalf("cold keys: %+v -> %+v", before, after)
	}
}

// Unspent tokens go back to Redis after the lease TTL, and on Close.
func TestStrandedTokensReturn(t *testing.T) {
	prefix := newPrefix()
	inner := shared(t, prefix)
	s := lease.New(inner, lease.WithTTL(100*time.Millisecond), lease.WithTarget(time.Second))
	sp := spec(t, 1000, 0.001) // no refill to speak of
	// Warm the key until it holds a lease (how big a batch is depends on
	// the rate the key was seen at, so a slow machine may empty one
	// exactly: take on until one is held).
	warm := func(s *lease.Store, least, most int) int {
		t.Helper()
		n := 0
		for ; n < least || s.Stats().Leased == 0; n++ {
			if n == most {
				t.Fatalf("no batch leased for a hot key after %d takes", n)
			}
			s.Take(context.Background(), []store.Item{{Key: "k", Spec: sp, Cost: 1}})
		}
		return n
	}
	n := warm(s, 400, 800)
	leased := s.Stats().Leased
	if got := peek(t, inner, "k", sp); got != 1000-int64(n)-leased {
		t.Fatalf("shared bucket %d, want 1000 - %d spent - %d leased", got, n, leased)
	}
	left := 1000 - int64(n)
	deadline := time.Now().Add(5 * time.Second)
	for peek(t, inner, "k", sp) != left {
		if time.Now().After(deadline) {
			t.Fatalf("leased tokens not returned after the TTL: %d, want %d", peek(t, inner, "k", sp), left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.Stats().Leased != 0 {
		t.Fatal("still counted as leased")
	}
	// Close returns what is leased at once.
	s2 := lease.New(shared(t, prefix), lease.WithTTL(time.Hour), lease.WithTarget(time.Second))
	n2 := warm(s2, 100, 150)
	s2.Close()
	if got := peek(t, inner, "k", sp); got != left-int64(n2) {
		t.Fatalf("after Close: %d, want %d", got, left-int64(n2))
	}
	s.Close()
}

// All-or-nothing holds across leased keys: a request refused by one key
// spends nothing from the others' leases.
func TestAllOrNothingAcrossLeases(t *testing.T) {
	prefix := newPrefix()
	inner := shared(t, prefix)
	s := lease.New(inner, lease.WithTTL(time.Hour), lease.WithTarget(time.Second))
	defer s.Close()
	big := spec(t, 1000, 0.001)
	tiny := spec(t, 3, 0.001)
	ctx := context.Background()
	for range 3 {
		if r, _ := s.Take(ctx, []store.Item{{Key: "a", Spec: big, Cost: 1}, {Key: "b", Spec: tiny, Cost: 1}}); !r.Allowed {
			t.Fatal("refused early")
		}
	}
	before := s.Stats().Leased
	items := []store.Item{{Key: "a", Spec: big, Cost: 1}, {Key: "b", Spec: tiny, Cost: 1}}
	if r, _ := s.Take(ctx, items); r.Allowed {
		t.Fatal("admitted past b's capacity")
	}
	if items[1].Decision.Allowed || items[1].Decision.RetryAfter <= 0 {
		t.Fatalf("b's refusal: %+v", items[1].Decision)
	}
	if s.Stats().Leased != before {
		t.Fatalf("a refused request spent leased tokens: %d -> %d", before, s.Stats().Leased)
	}
}
