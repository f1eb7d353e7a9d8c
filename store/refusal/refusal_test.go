// The cache's rules one by one: what it answers, what goes to the store, its
// bound, its size, and two instances sharing a store.

package refusal_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/refusal"
)

// counting is a store that counts the Take calls that reach it, and the
// admissions.
type counting struct {
	store.Store
	takes, admitted atomic.Int64
}

func (c *counting) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	c.takes.Add(1)
	r, err := c.Store.Take(ctx, items)
	if err == nil && r.Allowed {
		c.admitted.Add(1)
	}
	return r, err
}

func setup(t *testing.T, n int) (*refusal.Store, *counting, *sluice.ManualClock) {
	t.Helper()
	c := sluice.NewManualClock(epoch)
	inner := &counting{Store: memstore.New(memstore.WithClock(c))}
	s := refusal.New(inner, n, refusal.WithClock(c), refusal.WithLabel(func(key string) string { return key[:1] }))
	t.Cleanup(func() { s.Close() })
	return s, inner, c
}

func take1(t *testing.T, s store.Store, it store.Item) (store.Result, store.Item) {
	t.Helper()
	items := []store.Item{it}
	r, err := s.Take(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	return r, items[0]
}

// A refused request's repeats are answered without a store call until its
// RetryAfter, RetryAfter counting down; then the store decides again.
func TestRepeatsCostNoStoreCall(t *testing.T) {
	s, inner, c := setup(t, 100)
	sp := mustSpec(t, bucketLimit(10, 2)) // a token every 500 ms
	it := store.Item{Key: "a:1", Spec: sp, Cost: 10}
	if r, _ := take1(t, s, it); !r.Allowed {
		t.Fatal("a full bucket refused its capacity")
	}
	it.Cost = 4
	_, first := take1(t, s, it)
	if first.Decision.Allowed || first.Decision.RetryAfter != 2*time.Second {
		t.Fatalf("the store's refusal: %+v", first.Decision)
	}
	calls := inner.takes.Load()
	c.Advance(700 * time.Millisecond)
	r, got := take1(t, s, it)
	want := sluice.Decision{Remaining: 1, RetryAfter: 1300 * time.Millisecond, ResetAfter: 4300 * time.Millisecond}
	if r.Allowed || got.Decision != want || inner.takes.Load() != calls {
		t.Fatalf("rule: a repeat before RetryAfter is answered from the cache, counted down: %+v (store calls %d → %d), want %+v",
			got.Decision, calls, inner.takes.Load(), want)
	}
	if h := s.HitsByLabel()["a"]; h != 1 || s.Stats().Hits != 1 {
		t.Fatalf("hits by label %v, stats %+v", s.HitsByLabel(), s.Stats())
	}
	// A larger cost is refused too (its own wait); a smaller one, a peek
	// and a booking that could wait long enough go to the store.
	it.Cost = 6
	if _, got := take1(t, s, it); got.Decision.RetryAfter != 2300*time.Millisecond || inner.takes.Load() != calls {
		t.Fatalf("rule: a larger cost is refused from the cache with its own wait: %+v", got.Decision)
	}
	for _, x := range []store.Item{{Key: "a:1", Spec: sp, Cost: 1}, {Key: "a:1", Spec: sp}, {Key: "a:1", Spec: sp, Cost: 4, MaxWait: 2 * time.Second}} {
		before := inner.takes.Load()
		take1(t, s, x)
		if inner.takes.Load() != before+1 {
			t.Fatalf("rule: cost %d max_wait %v goes to the store", x.Cost, x.MaxWait)
		}
	}
	// The booking was admitted (it took 4 in debt), leaving less than 4:
	// the next request of 4 is refused from the cache, as the store would.
	it.Cost = 4
	before := inner.takes.Load()
	if r, got := take1(t, s, it); r.Allowed || inner.takes.Load() != before || got.Decision.RetryAfter != 3800*time.Millisecond {
		t.Fatalf("rule: an admission leaving less than its cost refuses the next such request from the cache: %+v", got.Decision)
	}
	// A booking that cannot wait long enough is refused from the cache.
	before = inner.takes.Load()
	it.MaxWait = 100 * time.Millisecond
	if r, _ := take1(t, s, it); r.Allowed || inner.takes.Load() != before {
		t.Fatal("rule: a booking whose wait cannot reach the refused cost is refused from the cache")
	}
	it.MaxWait = 0
	c.Advance(time.Hour)
	if r, _ := take1(t, s, it); !r.Allowed || inner.takes.Load() != before+1 {
		t.Fatal("rule: after RetryAfter the store decides")
	}
}

// A return of tokens through the cache (a settle, a cancel) drops the
// key's refusal: the next request goes to the store, which admits it.
func TestReturnDropsTheRefusal(t *testing.T) {
	s, inner, _ := setup(t, 100)
	sp := mustSpec(t, bucketLimit(10, 0.001))
	it := store.Item{Key: "a:1", Spec: sp, Cost: 10}
	_, got := take1(t, s, it)
	it.Cost = 5
	take1(t, s, it)
	if s.Len() != 1 {
		t.Fatalf("entries %d, want 1", s.Len())
	}
	if err := s.Adjust(context.Background(), []store.Adjustment{{Key: "a:1", Spec: sp, Delta: -5, RefundBefore: got.RefundBefore}}); err != nil {
		t.Fatal(err)
	}
	before := inner.takes.Load()
	if r, _ := take1(t, s, it); !r.Allowed || inner.takes.Load() != before+1 {
		t.Fatalf("rule: after a return the store decides (and admits): %+v", r)
	}
	// A changed spec (an override) misses, and drops the refusal.
	take1(t, s, it)
	other := mustSpec(t, bucketLimit(10, 1000))
	before = inner.takes.Load()
	if take1(t, s, store.Item{Key: "a:1", Spec: other, Base: sp, Cost: 5}); inner.takes.Load() != before+1 {
		t.Fatal("rule: a request under another spec goes to the store")
	}
}

// Multi-item requests, in-flight caps, sliding windows, penalty boxes and
// a priority class's items (a reserve) always go to the store.
func TestWhatIsNotCached(t *testing.T) {
	s, inner, _ := setup(t, 100)
	sp := mustSpec(t, bucketLimit(1, 0.001))
	blocked := bucketLimit(1, 0.001)
	blocked.BlockFor = time.Hour
	for name, items := range map[string][]store.Item{
		"two items":   {{Key: "m:1", Spec: sp, Cost: 1}, {Key: "m:2", Spec: sp, Cost: 1}},
		"in flight":   {{Key: "c:1", Spec: &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: time.Hour}, Cost: 1}},
		"penalty box": {{Key: "b:1", Spec: mustSpec(t, blocked), Cost: 1}},
		"reserve":     {{Key: "r:1", Spec: mustSpec(t, bucketLimit(2, 0.001)), Cost: 1, Reserve: store.ReserveScale / 2}}, // (the class sees 1 of 2)
	} {
		for range 3 {
			if _, err := s.Take(context.Background(), append([]store.Item(nil), items...)); err != nil {
				t.Fatal(err)
			}
		}
		if s.Stats().Hits != 0 {
			t.Fatalf("%s: answered from the cache", name)
		}
	}
	if inner.takes.Load() != 12 {
		t.Fatalf("store calls %d, want 12", inner.takes.Load())
	}
}

// The cache holds at most N refusals; at N the oldest go.
func TestBounded(t *testing.T) {
	for _, n := range []int{1, 5, 1000} {
		s, _, _ := setup(t, n)
		sp := mustSpec(t, bucketLimit(1, 0.001))
		for i := range 3 * n {
			it := store.Item{Key: fmt.Sprint("k", i), Spec: sp, Cost: 1}
			take1(t, s, it)
			take1(t, s, it)
			if s.Len() > int64(n) {
				t.Fatalf("N %d: %d entries", n, s.Len())
			}
		}
		if st := s.Stats(); st.Entries < int64(n)*9/10 || st.Evictions == 0 {
			t.Fatalf("N %d: %+v", n, st)
		}
		// The newest are held: the last key's repeat is a hit.
		hits := s.Stats().Hits
		take1(t, s, store.Item{Key: fmt.Sprint("k", 3*n-1), Spec: sp, Cost: 1})
		if s.Stats().Hits != hits+1 {
			t.Fatalf("N %d: the newest refusal was not held", n)
		}
	}
	if s := refusal.New(memstore.New(), 0); s != nil {
		sp := mustSpec(t, bucketLimit(1, 0.001))
		for range 3 {
			take1(t, s, store.Item{Key: "k", Spec: sp, Cost: 1})
		}
		if s.Stats().Hits != 0 || s.Len() != 0 {
			t.Fatal("N 0 caches something")
		}
	}
}

// Two instances over one store: B returns tokens A does not know of. A's
// cache then refuses what the store would admit, but only within the
// refusal's RetryAfter, which is at most the time to refill the refused
// cost; and A never admits what the store would not (every admission is the
// store's).
func TestAnotherInstanceReturning(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	shared := memstore.New(memstore.WithClock(c))
	a := refusal.New(shared, 1000, refusal.WithClock(c))
	b := refusal.New(shared, 1000, refusal.WithClock(c))
	specs := []*store.Spec{mustSpec(t, bucketLimit(10, 3)), mustSpec(t, bucketLimit(20, 0.5)), mustSpec(t, bucketLimit(5, 50))}
	rng := rand.New(rand.NewPCG(27, 1))
	type refused struct {
		at    time.Time
		retry time.Duration
	}
	last := map[string]refused{}
	taken := map[string][]store.Item{} // b's admissions, to return
	over, hits := 0, uint64(0)
	for step := range 20000 {
		c.Advance(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
		i := rng.IntN(len(specs))
		sp := specs[i]
		key := fmt.Sprint("k", i, "-", rng.IntN(3))
		it := store.Item{Key: key, Spec: sp, Cost: 1 + rng.Int64N(3)}
		if rng.IntN(3) == 0 {
			r, got := take1(t, b, it)
			if r.Allowed {
				taken[key] = append(taken[key], got)
			}
			if rng.IntN(2) == 0 && len(taken[key]) > 0 {
				x := taken[key][0]
				taken[key] = taken[key][1:]
				if err := b.Adjust(context.Background(), []store.Adjustment{{Key: key, Spec: sp, Delta: -x.Cost, RefundBefore: x.RefundBefore}}); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		h := a.Stats().Hits
		r, got := take1(t, a, it)
		if a.Stats().Hits == h {
			d := got.Decision
			switch {
			case !r.Allowed:
				last[key] = refused{c.Now(), d.RetryAfter}
			case d.Remaining < it.Cost:
				// (the refusal its admission implies for the next such request)
				last[key] = refused{c.Now(), d.ResetAfter - time.Duration(float64(sp.Capacity()-it.Cost)/sp.Rate()*1e9)}
			}
			continue
		}
		// Answered from A's cache: would the store have admitted it?
		peek := []store.Item{{Key: key, Spec: sp}}
		if _, err := shared.Take(context.Background(), peek); err != nil {
			t.Fatal(err)
		}
		if peek[0].Decision.Remaining < it.Cost {
			continue
		}
		over++
		rf := last[key]
		refill := time.Duration(float64(it.Cost)/sp.Rate()*1e9) + 1
		if since := c.Now().Sub(rf.at); since >= rf.retry || rf.retry > refill {
			t.Fatalf("step %d: refused %v after the store's refusal (RetryAfter %v, refill of cost %d %v): beyond the bound", step, since, rf.retry, it.Cost, refill)
		}
		hits = a.Stats().Hits
	}
	t.Logf("%d answers from the cache, %d of them refusing what the store would admit (tokens B returned)", a.Stats().Hits, over)
	if over == 0 || hits == 0 {
		t.Fatal("the trace never made the cache refuse what the store would admit: it tests nothing")
	}
}

// Concurrent floods, settles and refunds under -race: every admission is
// the store's, and the cache never holds more than N.
func TestConcurrent(t *testing.T) {
	inner := &counting{Store: memstore.New()}
	s := refusal.New(inner, 64)
	sp := mustSpec(t, bucketLimit(20, 200))
	var wg sync.WaitGroup
	var admitted atomic.Int64
	start := time.Now()
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 3000 {
				key := fmt.Sprint("k", rng.IntN(100))
				items := []store.Item{{Key: key, Spec: sp, Cost: 1 + rng.Int64N(2)}}
				r, err := s.Take(context.Background(), items)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
					if rng.IntN(4) == 0 {
						s.Adjust(context.Background(), []store.Adjustment{{Key: key, Spec: sp, Delta: -items[0].Cost, RefundBefore: items[0].RefundBefore}})
					}
				}
				if s.Len() > 64 {
					t.Errorf("%d entries", s.Len())
					return
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != inner.admitted.Load() {
		t.Fatalf("admitted %d, the store admitted %d", admitted.Load(), inner.admitted.Load())
	}
	t.Logf("%d decisions in %v: %d store calls, %d hits, %d admitted", 8*3000, time.Since(start), inner.takes.Load(), s.Stats().Hits, admitted.Load())
}

// AdjustRelease returns tokens (and frees slots) in one call of the
// wrapped store, and drops the key's refusal as Adjust does.
func TestAdjustReleaseDropsTheRefusal(t *testing.T) {
	s, inner, _ := setup(t, 100)
	var _ store.AdjustReleaser = s
	sp := mustSpec(t, bucketLimit(4, 0.001))
	it := store.Item{Key: "a:1", Spec: sp, Cost: 4}
	_, got := take1(t, s, it)
	take1(t, s, it)
	if s.Len() != 1 {
		t.Fatalf("entries %d", s.Len())
	}
	if err := store.AdjustRelease(context.Background(), s, []store.Adjustment{{Key: "a:1", Spec: sp, Delta: -4, RefundBefore: got.RefundBefore}}, store.Slots{}); err != nil {
		t.Fatal(err)
	}
	before := inner.takes.Load()
	if r, _ := take1(t, s, it); !r.Allowed || inner.takes.Load() != before+1 {
		t.Fatal("rule: after a return through AdjustRelease the store decides (and admits)")
	}
}

// pingable is a store that can be pinged, and made to fail its pings.
type pingable struct {
	store.Store
	down  atomic.Bool
	pings atomic.Int64
}

var errDown = fmt.Errorf("test: %w", store.ErrUnavailable)

func (p *pingable) Ping(context.Context) error {
	p.pings.Add(1)
	if p.down.Load() {
		return errDown
	}
	return nil
}

// The cache answers while the store is known to answer: a call that did
// not fail vouches for it for the liveness window; after that a request
// the cache would refuse pings it first (one Ping per window), and an
// error is returned for the failover above to see.
func TestLiveness(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	inner := &pingable{Store: memstore.New(memstore.WithClock(c))}
	s := refusal.New(inner, 100, refusal.WithClock(c), refusal.WithLiveness(time.Second))
	sp := mustSpec(t, bucketLimit(1, 0.0001))
	it := store.Item{Key: "k", Spec: sp, Cost: 1}
	take1(t, s, it) // admitted, leaving 0: the next is refused from the cache
	for range 3 {
		c.Advance(300 * time.Millisecond)
		if r, _ := take1(t, s, it); r.Allowed || inner.pings.Load() != 0 {
			t.Fatalf("rule: within the window no Ping: %+v, %d pings", r, inner.pings.Load())
		}
	}
	c.Advance(200 * time.Millisecond) // 1.1 s since the store last answered
	take1(t, s, it)
	take1(t, s, it)
	if inner.pings.Load() != 1 || s.Stats().Hits != 5 {
		t.Fatalf("rule: past the window one Ping, then answers: %d pings, %+v", inner.pings.Load(), s.Stats())
	}
	inner.down.Store(true)
	c.Advance(2 * time.Second)
	if _, err := s.Take(context.Background(), []store.Item{it}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("rule: a store that does not answer its Ping is an error, not a cached answer: %v", err)
	}
	if s.Stats().Hits != 5 {
		t.Fatal("answered from the cache while the store did not answer")
	}
	// Back: the refusals held before the failure are not trusted (the
	// store may have lost its state): the next request is the store's.
	inner.down.Store(false)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Hits
	if take1(t, s, it); s.Stats().Hits != before {
		t.Fatal("rule: after a failure of the store its earlier refusals are not answered")
	}
	// Off: the cache answers whatever the store does.
	off := refusal.New(inner, 100, refusal.WithClock(c), refusal.WithLiveness(0))
	take1(t, off, store.Item{Key: "j", Spec: sp, Cost: 1})
	c.Advance(time.Hour)
	if r, err := off.Take(context.Background(), []store.Item{{Key: "j", Spec: sp, Cost: 1}}); err != nil || r.Allowed || off.Stats().Hits != 1 {
		t.Fatalf("WithLiveness(0): %+v %v", r, err)
	}
}
