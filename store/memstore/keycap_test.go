package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

// keysIn returns n keys (prefix + a number) that s puts in shard, found at
// run time (the shard comes from a hash with a random seed).
func keysIn(s *memstore.Store, shard, n int, prefix string) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint(prefix, i); s.ShardOf(k) == shard {
			keys = append(keys, k)
		}
	}
	return keys
}

// keysApart returns n keys that s puts in n different shards.
func keysApart(s *memstore.Store, n int, prefix string) []string {
	var keys []string
	seen := map[int]bool{}
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint(prefix, i); !seen[s.ShardOf(k)] {
			seen[s.ShardOf(k)] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func fullError(t *testing.T, err error) *store.FullError {
	t.Helper()
	var fe *store.FullError
	if !errors.As(err, &fe) || !errors.Is(err, store.ErrFull) {
		t.Fatalf("want a *store.FullError matching store.ErrFull, got %v", err)
	}
	return fe
}

func take1(t *testing.T, s *memstore.Store, it store.Item) (store.Result, error) {
	t.Helper()
	items := []store.Item{it}
	r, err := s.Take(context.Background(), items)
	if err == nil && !r.Allowed {
		t.Fatalf("%s refused: %+v", it.Key, items[0].Decision)
	}
	return r, err
}

// A cap of 100 admits exactly 100 distinct keys, whatever shards they
// hash to and whatever they are (buckets, windows, slot sets), and (with
// WithRefuseWhenFull; lru_test.go has the default) refuses the 101st with
// a FullError while the 100 keep working.
func TestCapAdmitsExactlyNWhateverTheHashes(t *testing.T) {
	t.Parallel()
	bk, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 0.001}) // never idle in this test
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 10, Window: time.Hour}}
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: time.Hour}
	for _, tc := range []struct {
		name string
		keys func(s *memstore.Store) []string
		spec func(i int) *store.Spec
	}{
		{"all in one shard", func(s *memstore.Store) []string { return keysIn(s, s.ShardOf("x"), 101, "t") },
			func(int) *store.Spec { return bk }},
		{"spread", func(*memstore.Store) []string {
			var keys []string
			for i := range 101 {
				keys = append(keys, fmt.Sprint("tenant-", i))
			}
			return keys
		}, func(int) *store.Spec { return bk }},
		{"kinds mixed in one shard", func(s *memstore.Store) []string { return keysIn(s, 7, 101, "m") },
			func(i int) *store.Spec { return []*store.Spec{bk, win, conc}[i%3] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sluice.NewManualClock(storetest.Epoch)
			s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(100), memstore.WithRefuseWhenFull())
			keys := tc.keys(s)
			for i, k := range keys[:100] {
				if _, err := take1(t, s, store.Item{Key: k, Spec: tc.spec(i), Cost: 1}); err != nil {
					t.Fatalf("key %d of 100 (%s): %v", i+1, k, err)
				}
			}
			if st := s.Stats(); st.Keys != 100 || st.Evictions != 0 {
				t.Fatalf("stats %+v, want 100 keys", st)
			}
			_, err := take1(t, s, store.Item{Key: keys[100], Spec: tc.spec(100), Cost: 1})
			fe := fullError(t, err)
			if fe.Keys != 100 || fe.Cap != 100 || fe.Key != keys[100] {
				t.Fatalf("%+v", fe)
			}
			if !strings.HasPrefix(err.Error(), `store: key capacity reached: 100 keys held (cap 100); new key "`+keys[100]+`" refused`) {
				t.Fatalf("message %q", err)
			}
			if k := s.Stats().Keys; k != 100 || s.HeldKeys() != 100 {
				t.Fatalf("after the refusal: %d keys counted, %d held", k, s.HeldKeys())
			}
			for i, k := range keys[:100] { // existing keys keep working
				if _, err := take1(t, s, store.Item{Key: k, Spec: tc.spec(i), Cost: 1}); err != nil {
					t.Fatalf("existing key %s: %v", k, err)
				}
			}
		})
	}
}

// RetryAfter is the time until the earliest held key is idle (exact on a
// manual clock), and a new key is admitted then, an idle key evicted.
func TestFullErrorRetryAfterIsTheEarliestIdleTime(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(100), memstore.WithRefuseWhenFull())
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 1}) // a token a second
	early := "early"
	keys := keysIn(s, s.ShardOf(early), 99, "t") // all in early's shard but one
	for _, k := range keys[:98] {
		take1(t, s, store.Item{Key: k, Spec: sp, Cost: 5}) // idle at +5 s
	}
	take1(t, s, store.Item{Key: "elsewhere", Spec: sp, Cost: 5})
	c.Advance(time.Second)
	if _, err := take1(t, s, store.Item{Key: early, Spec: sp, Cost: 2}); err != nil { // idle at +3 s
		t.Fatal(err)
	}
	c.Advance(time.Second) // +2 s
	_, err := take1(t, s, store.Item{Key: "new1", Spec: sp, Cost: 5})
	if fe := fullError(t, err); fe.RetryAfter != time.Second {
		t.Fatalf("RetryAfter %v, want 1s (early is idle at +3 s)", fe.RetryAfter)
	}
	if !strings.HasSuffix(err.Error(), `; new key "new1" refused; room in 1s`) {
		t.Fatalf("message %q", err)
	}
	c.Advance(time.Second - time.Millisecond)
	_, err = take1(t, s, store.Item{Key: "new1", Spec: sp, Cost: 5})
	if fe := fullError(t, err); fe.RetryAfter != time.Millisecond {
		t.Fatalf("RetryAfter %v, want 1ms", fe.RetryAfter)
	}
	if st := s.Stats(); st.Keys != 100 || st.Evictions != 0 {
		t.Fatalf("refusals took something: %+v", st)
	}
	c.Advance(time.Millisecond) // +3 s: early is idle
	if _, err := take1(t, s, store.Item{Key: "new1", Spec: sp, Cost: 5}); err != nil {
		t.Fatalf("at RetryAfter: %v", err)
	}
	if st := s.Stats(); st.Keys != 100 || st.Evictions != 1 || s.HeldKeys() != 100 {
		t.Fatalf("want early evicted for new1: %+v, %d held", st, s.HeldKeys())
	}
	// The others are idle at +5 s, new1 at +8 s.
	_, err = take1(t, s, store.Item{Key: "new2", Spec: sp, Cost: 5})
	if fe := fullError(t, err); fe.RetryAfter != 2*time.Second {
		t.Fatalf("RetryAfter %v, want 2s", fe.RetryAfter)
	}
	// At +5 s every key but new1 is idle: a new key in a shard that holds
	// none evicts them from the other shards and is admitted.
	c.Advance(2 * time.Second)
	var empty string
	for i := 0; empty == ""; i++ {
		if k := fmt.Sprint("e", i); s.ShardOf(k) != s.ShardOf(early) && s.ShardOf(k) != s.ShardOf("elsewhere") && s.ShardOf(k) != s.ShardOf("new1") {
			empty = k
		}
	}
	if _, err := take1(t, s, store.Item{Key: empty, Spec: sp, Cost: 5}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Keys != 2 || st.Evictions != 100 || s.HeldKeys() != 2 {
		t.Fatalf("want 99 more keys evicted: %+v", st)
	}
}

// Slot sets are keys: they count against the cap, a new one is refused
// when the cap is reached, RetryAfter accounts for a lease's expiry, and a
// set whose leases all expired or were released is idle (evicted for a new
// key).
func TestLeaseSetsCountAgainstTheCap(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(3), memstore.WithRefuseWhenFull())
	bk, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 1})
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 2, SlotTTL: 3 * time.Second}
	ctx := context.Background()
	keys := keysApart(s, 7, "k")                             // in different shards: a cap per shard would admit them all
	take1(t, s, store.Item{Key: keys[0], Spec: bk, Cost: 5}) // idle at +5 s
	take1(t, s, store.Item{Key: keys[1], Spec: bk, Cost: 5})
	r, err := take1(t, s, store.Item{Key: keys[2], Spec: conc, Cost: 1}) // idle at +3 s, or once released
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Keys != 3 {
		t.Fatalf("a lease set is a key: %+v", st)
	}
	_, err = take1(t, s, store.Item{Key: keys[3], Spec: conc, Cost: 1})
	if fe := fullError(t, err); fe.RetryAfter != 3*time.Second {
		t.Fatalf("new lease set: RetryAfter %v, want 3s (the lease expires)", fe.RetryAfter)
	}
	if _, err := take1(t, s, store.Item{Key: keys[2], Spec: conc, Cost: 1}); err != nil { // its set exists
		t.Fatalf("a second slot of a held set: %v", err)
	}
	if err := s.Release(ctx, r.Slots); err != nil {
		t.Fatal(err)
	}
	_, err = take1(t, s, store.Item{Key: keys[3], Spec: bk, Cost: 5})
	if fe := fullError(t, err); fe.RetryAfter != 3*time.Second { // the second slot is still live
		t.Fatalf("RetryAfter %v, want 3s", fe.RetryAfter)
	}
	c.Advance(3 * time.Second) // it has expired: keys[2]'s set is idle
	if _, err := take1(t, s, store.Item{Key: keys[3], Spec: bk, Cost: 5}); err != nil {
		t.Fatalf("after the lease expired: %v", err)
	}
	if st := s.Stats(); st.Keys != 3 || st.Evictions != 1 || s.HeldKeys() != 3 {
		t.Fatalf("want the lease set evicted: %+v", st)
	}
	c.Advance(2 * time.Second) // +5 s: keys[0] and keys[1] are idle
	r, _ = take1(t, s, store.Item{Key: keys[4], Spec: conc, Cost: 1})
	take1(t, s, store.Item{Key: keys[5], Spec: conc, Cost: 1})
	_, err = take1(t, s, store.Item{Key: keys[6], Spec: bk, Cost: 5})
	if fe := fullError(t, err); fe.RetryAfter != 3*time.Second { // keys[3] idle at +8 s, the leases expire then
		t.Fatalf("RetryAfter %v, want 3s", fe.RetryAfter)
	}
	if err := s.Release(ctx, r.Slots); err != nil { // keys[4]'s set is idle now
		t.Fatal(err)
	}
	if _, err := take1(t, s, store.Item{Key: keys[6], Spec: bk, Cost: 5}); err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if st := s.Stats(); st.Keys != 3 || st.Evictions != 4 || s.HeldKeys() != 3 {
		t.Fatalf("%+v", st)
	}
}

// A charge to an evicted key that finds no room is reported, not dropped
// silently.
func TestAdjustReportsAChargeWithoutRoom(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(1), memstore.WithRefuseWhenFull())
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 1})
	ctx := context.Background()
	take1(t, s, store.Item{Key: "a", Spec: sp, Cost: 5})
	c.Advance(5 * time.Second)                           // a idle
	take1(t, s, store.Item{Key: "b", Spec: sp, Cost: 5}) // evicts a
	err := s.Adjust(ctx, []store.Adjustment{{Key: "a", Spec: sp, Delta: 3}})
	if fe := fullError(t, err); fe.Key != "a" || fe.RetryAfter != 5*time.Second {
		t.Fatalf("%+v", fe)
	}
	c.Advance(5 * time.Second) // b idle: the charge finds room
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "a", Spec: sp, Delta: 3}}); err != nil {
		t.Fatal(err)
	}
	peek := []store.Item{{Key: "a", Spec: sp}}
	s.Take(ctx, peek)
	if peek[0].Decision.Remaining != 7 {
		t.Fatalf("a holds %d, want 7", peek[0].Decision.Remaining)
	}
}

// While no key can be idle, refusals scan nothing; a stale bound (the key
// with the earliest idle time was used since) makes its shard scanned once,
// not once per refusal.
func TestRefusalsDoNotScan(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	const n = 6400
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(n), memstore.WithRefuseWhenFull())
	slow, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 0.001}) // idle after 1000 s a token
	hot, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 10})
	take1(t, s, store.Item{Key: "hot", Spec: hot, Cost: 1}) // idle at +100 ms
	for i := range n - 1 {
		take1(t, s, store.Item{Key: fmt.Sprint("k", i), Spec: slow, Cost: 1})
	}
	for i := range 1000 {
		_, err := take1(t, s, store.Item{Key: fmt.Sprint("new", i), Spec: slow, Cost: 1})
		if fe := fullError(t, err); fe.RetryAfter != 100*time.Millisecond {
			t.Fatalf("RetryAfter %v, want 100ms", fe.RetryAfter)
		}
	}
	if sc := s.Scans(); sc != 0 {
		t.Fatalf("%d scans while no key could be idle", sc)
	}
	c.Advance(50 * time.Millisecond)
	take1(t, s, store.Item{Key: "hot", Spec: hot, Cost: 1}) // now idle at +200 ms
	c.Advance(60 * time.Millisecond)                        // +110 ms: the shard's bound (+100 ms) is stale
	for i := range 1000 {
		_, err := take1(t, s, store.Item{Key: fmt.Sprint("new", i), Spec: slow, Cost: 1})
		if fe := fullError(t, err); fe.RetryAfter != 90*time.Millisecond {
			t.Fatalf("RetryAfter %v, want 90ms (hot is idle at +200 ms)", fe.RetryAfter)
		}
	}
	if sc := s.Scans(); sc != 1 {
		t.Fatalf("%d scans, want 1 (of hot's shard)", sc)
	}
	c.Advance(90 * time.Millisecond) // +200 ms: hot is idle
	if _, err := take1(t, s, store.Item{Key: "newest", Spec: slow, Cost: 1}); err != nil {
		t.Fatal(err)
	}
}

// Many goroutines creating keys past the cap, with requests over several
// shards, leases and adjustments, while keys become idle: the store never
// holds more than the cap, its count stays true, and nothing deadlocks.
func TestCapUnderConcurrency(t *testing.T) {
	const capN = 40
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(capN), memstore.WithRefuseWhenFull()) // (LRU: TestLRUUnderConcurrency)
	bk, _ := store.NewBucketSpec(bucket.Limit{Capacity: 4, Rate: 100})
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 4, Window: 20 * time.Millisecond}}
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 2, SlotTTL: 30 * time.Millisecond}
	specs := []*store.Spec{bk, win, conc}
	ctx := context.Background()
	var stop atomic.Bool
	var over atomic.Int64
	sampled := make(chan struct{})
	go func() { // watch the count
		defer close(sampled)
		for !stop.Load() {
			if k := s.Stats().Keys; k > capN {
				over.Store(k)
			}
			runtime.Gosched()
		}
	}()
	var full, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			var leases []store.Slots
			for range 1500 {
				if rng.IntN(8) == 0 {
					c.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
				}
				items := make([]store.Item, 1+rng.IntN(3))
				for i := range items {
					k := rng.IntN(1000)
					items[i] = store.Item{Key: fmt.Sprint(k%3, "/", k, "/", i), Spec: specs[k%3], Cost: 1}
				}
				r, err := s.Take(ctx, items)
				switch {
				case errors.Is(err, store.ErrFull):
					full.Add(1)
				case err != nil:
					t.Error(err)
					return
				case r.Allowed:
					admitted.Add(1)
					if r.Slots.ID != "" {
						leases = append(leases, r.Slots)
					}
					if rng.IntN(3) == 0 {
						var adj []store.Adjustment
						for _, it := range items {
							if it.Spec.Kind != store.Concurrency {
								adj = append(adj, store.Adjustment{Key: it.Key, Spec: it.Spec, Delta: int64(1 - 2*rng.IntN(2)), RefundBefore: it.RefundBefore})
							}
						}
						if err := s.Adjust(ctx, adj); err != nil && !errors.Is(err, store.ErrFull) {
							t.Error(err)
						}
					}
				}
				if len(leases) > 0 && rng.IntN(2) == 0 {
					s.Release(ctx, leases[0])
					leases = leases[1:]
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("deadlock: the workers did not finish")
	}
	stop.Store(true)
	<-sampled
	if k := over.Load(); k != 0 {
		t.Fatalf("held %d keys, cap %d", k, capN)
	}
	if st := s.Stats(); st.Keys != s.HeldKeys() || st.Keys > capN {
		t.Fatalf("count %d, keys held %d", st.Keys, s.HeldKeys())
	}
	if full.Load() == 0 || admitted.Load() == 0 || s.Stats().Evictions == 0 {
		t.Fatalf("the test proves nothing: %d full, %d admitted, %+v", full.Load(), admitted.Load(), s.Stats())
	}
	t.Logf("%d admitted, %d refused full, %+v", admitted.Load(), full.Load(), s.Stats())
}

// On a random trace of every operation (takes of one and several items,
// peeks, refusals, adjustments, leases and releases, at the cap and
// below), every shard's bound stays at or below each of its keys' idle
// times — the claim that a take never makes a key idle sooner, which lets
// the hot path skip the bound — and the count stays true.
func TestIdleBoundsHold(t *testing.T) {
	t.Parallel()
	t.Run("lru", func(t *testing.T) { idleBoundsHold(t, false) })
	t.Run("refuse when full", func(t *testing.T) { idleBoundsHold(t, true) })
}

func idleBoundsHold(t *testing.T, refuseFull bool) {
	c := sluice.NewManualClock(storetest.Epoch)
	opts := []memstore.Option{memstore.WithClock(c), memstore.WithMaxKeys(30)}
	if refuseFull {
		opts = append(opts, memstore.WithRefuseWhenFull())
	}
	s := memstore.New(opts...)
	b1, _ := store.NewBucketSpec(bucket.Limit{Capacity: 5, Rate: 2})
	b2, _ := store.NewBucketSpec(bucket.Limit{Capacity: 50, Rate: 0.5})
	b3, _ := store.NewBucketSpec(bucket.Limit{Capacity: 3, Rate: 7.3})
	sw := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 4, Window: time.Second}}
	fw := &store.Spec{Kind: store.FixedWindow, Window: window.Limit{Limit: 6, Window: 700 * time.Millisecond}}
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 2, SlotTTL: 900 * time.Millisecond}
	specs := []*store.Spec{b1, b2, b3, sw, fw, conc}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	var taken []store.Item
	var leases []store.Slots
	var full int
	for step := range 20000 {
		c.Advance(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
		switch op := rng.IntN(10); {
		case op < 7: // a take of 1 to 3 items
			items := make([]store.Item, 1+rng.IntN(3))
			for i := range items {
				k := rng.IntN(60)
				sp := specs[k%len(specs)]
				items[i] = store.Item{Key: fmt.Sprint(k, "/", i), Spec: sp, Cost: rng.Int64N(sp.Capacity() + 1)}
			}
			r, err := s.Take(ctx, items)
			switch {
			case errors.Is(err, store.ErrFull):
				full++
			case err != nil:
				t.Fatal(err)
			case r.Allowed:
				taken = append(taken, items...)
				if r.Slots.ID != "" {
					leases = append(leases, r.Slots)
				}
			}
		case op < 9 && len(taken) > 0: // adjust an item taken earlier
			it := taken[rng.IntN(len(taken))]
			if it.Spec.Kind == store.Concurrency {
				continue
			}
			delta := rng.Int64N(7) - 3
			if err := s.Adjust(ctx, []store.Adjustment{{Key: it.Key, Spec: it.Spec, Delta: delta, RefundBefore: it.RefundBefore}}); err != nil && !errors.Is(err, store.ErrFull) {
				t.Fatal(err)
			}
		case len(leases) > 0:
			i := rng.IntN(len(leases))
			s.Release(ctx, leases[i])
			leases = append(leases[:i], leases[i+1:]...)
		}
		if err := s.CheckIdleBounds(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if k, h := s.Stats().Keys, s.HeldKeys(); k != h || k > 30 {
			t.Fatalf("step %d: %d keys counted, %d held", step, k, h)
		}
	}
	_, lru := s.EvictionsByReason()
	if refuseFull && full == 0 || !refuseFull && lru == 0 || s.Stats().Evictions == 0 {
		t.Fatalf("the trace proves nothing: %d refused full, %d LRU evictions, %+v", full, lru, s.Stats())
	}
	t.Logf("%d refused full, %d LRU evictions, %+v, %d scans", full, lru, s.Stats(), s.Scans())
}
