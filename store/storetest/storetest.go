// Package storetest is the conformance suite every store.Store passes.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/window"
)

// Factory makes a fresh, empty store that reads its time from clock.
type Factory func(t *testing.T, clock sluice.Clock) store.Store

// Epoch is the manual clock's start in the suite (aligned to whole seconds).
var Epoch = time.Unix(1_800_000_000, 0)

// Option adjusts Run.
type Option func(map[string]string)

// Skip leaves case name out of the run, for a store to which its rule
// cannot apply; why is logged with the skip (a reduced suite says why).
func Skip(name, why string) Option { return func(m map[string]string) { m[name] = why } }

// Run runs the conformance suite, its cases in a fixed order, each named
// after the rule it checks.
func Run(t *testing.T, newStore Factory, opts ...Option) {
	skip := map[string]string{}
	for _, o := range opts {
		o(skip)
	}
	for _, c := range []struct {
		name string
		test func(*testing.T, Factory)
	}{
		{"BucketVector", testBucketVector},
		{"AllOrNothing", testAllOrNothing},
		{"RefusalReportsStateAsIs", testRefusalReportsState},
		{"RetryAfterIsTheMax", testRetryAfterMax},
		{"SlidingWindow", testSlidingWindow},
		{"FixedWindow", testFixedWindow},
		{"Concurrency", testConcurrency},
		{"RenewLease", testRenew},
		{"Quota", testQuota},
		{"PeekTakesNothing", testPeek},
		{"InvalidItems", testInvalid},
		{"ConcurrentExact", testConcurrentExact},
		{"IdenticalToPureModel", testIdenticalToModel},
		{"Adjust", testAdjust},
		{"BookFIFO", testBookFIFO},
		{"BookAllOrNothing", testBookAllOrNothing},
		{"BookCancel", testBookCancel},
		{"Pause", testPause},
		{"Lower", testLower},
		{"ChargesSaturate", testChargesSaturate},
		{"AdjustRelease", testAdjustRelease},
	} {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := skip[c.name]; ok {
				t.Skip("not applicable to this store: " + why)
			}
			c.test(t, newStore)
		})
	}
}

func open(t *testing.T, f Factory) (store.Store, *sluice.ManualClock) {
	t.Helper()
	c := sluice.NewManualClock(Epoch)
	s := f(t, c)
	t.Cleanup(func() { s.Close() })
	return s, c
}

func spec(t *testing.T, capacity int64, rate float64) *store.Spec {
	t.Helper()
	s, err := store.NewBucketSpec(bucket.Limit{Capacity: capacity, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// outcome is a Take's result with the items' decisions gathered.
type outcome struct {
	store.Result
	Decisions []sluice.Decision
}

func take(t *testing.T, s store.Store, items ...store.Item) outcome {
	t.Helper()
	r, err := s.Take(context.Background(), items)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	o := outcome{Result: r}
	for _, it := range items {
		o.Decisions = append(o.Decisions, it.Decision)
	}
	return o
}

// docs/behaviour.md section 1, vector 1, through the store.
func testBucketVector(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := spec(t, 3, 2)
	it := store.Item{Key: "v1", Spec: sp, Cost: 1}
	for i := range 3 {
		if r := take(t, s, it); !r.Allowed || r.Decisions[0].Remaining != int64(2-i) {
			t.Fatalf("rule: a full bucket of 3 admits 3 requests of cost 1, 2, 1, 0 left: request %d: %+v", i+1, r)
		}
	}
	if r := take(t, s, it); r.Allowed || r.Decisions[0].RetryAfter != 500*time.Millisecond {
		t.Fatalf("rule: an empty bucket (r=2/s) refuses with RetryAfter 500ms exactly: %+v", r)
	}
	c.Advance(250 * time.Millisecond)
	if r := take(t, s, it); r.Allowed {
		t.Fatalf("rule: half a token (0.25 s at 2/s) does not admit a cost of 1: %+v", r)
	}
	c.Advance(250 * time.Millisecond)
	if r := take(t, s, it); !r.Allowed {
		t.Fatalf("rule: waiting RetryAfter exactly admits: %+v", r)
	}
	if r := take(t, s, it); r.Allowed {
		t.Fatalf("rule: the token refilled is spent once: %+v", r)
	}
}

// A request refused by its tenant bucket leaves the global bucket as it was.
func testAllOrNothing(t *testing.T, f Factory) {
	s, _ := open(t, f)
	global, tenant := spec(t, 100, 1), spec(t, 2, 1)
	g := store.Item{Key: "global", Spec: global, Cost: 1}
	ten := store.Item{Key: "tenant:acme", Spec: tenant, Cost: 1}
	for range 2 {
		if r := take(t, s, g, ten); !r.Allowed {
			t.Fatalf("rule: a request within every limit is admitted: %+v", r)
		}
	}
	r := take(t, s, g, ten)
	if r.Allowed || !r.Decisions[0].Allowed || r.Decisions[1].Allowed || r.Decisions[1].RetryAfter != time.Second {
		t.Fatalf("rule: a request over one limit is refused, the other item saying it alone would admit, the refusing one its RetryAfter (1s): %+v", r)
	}
	peek := take(t, s, store.Item{Key: "global", Spec: global})
	if peek.Decisions[0].Remaining != 98 {
		t.Fatalf("rule: all or nothing: a refused request takes nothing from the items that would admit: global %d left, want 98", peek.Decisions[0].Remaining)
	}
	// The window and concurrency kinds take part too.
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 1, Window: time.Minute}}
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: time.Minute}
	w := store.Item{Key: "w", Spec: win, Cost: 1}
	cc := store.Item{Key: "c", Spec: conc, Cost: 1}
	if r := take(t, s, g, w, cc); !r.Allowed || r.Slots.ID == "" {
		t.Fatalf("rule: all or nothing spans kinds (bucket, window, in-flight): first request refused: %+v", r)
	}
	if r := take(t, s, g, w, cc); r.Allowed || r.Slots.ID != "" {
		t.Fatalf("rule: all or nothing spans kinds: the full window refuses the request: %+v", r)
	}
	if r := take(t, s, store.Item{Key: "c", Spec: conc}); r.Decisions[0].Remaining != 4 {
		t.Fatalf("rule: a refused request takes no in-flight slot: %+v", r.Decisions[0])
	}
	if peek := take(t, s, store.Item{Key: "global", Spec: global}); peek.Decisions[0].Remaining != 97 {
		t.Fatalf("rule: a refused request takes no tokens (across kinds): global %d left, want 97", peek.Decisions[0].Remaining)
	}
}

// Rule: when a request is refused nothing is taken, and every item reports
// its state as it is (what a peek reports: Remaining, ResetAfter), with
// Allowed saying whether that item alone would have admitted.
func testRefusalReportsState(t *testing.T, f Factory) {
	s, c := open(t, f)
	big, small := spec(t, 100, 20), spec(t, 60, 1)
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 100, Window: time.Minute}}
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: time.Minute}
	items := func(cost int64) []store.Item {
		return []store.Item{{Key: "tenant", Spec: big, Cost: cost}, {Key: "export", Spec: small, Cost: cost},
			{Key: "w", Spec: win, Cost: cost}, {Key: "c", Spec: conc, Cost: cost}}
	}
	if r := take(t, s, items(50)...); !r.Allowed {
		t.Fatalf("rule: a first request within every limit is admitted: %+v", r)
	}
	c.Advance(time.Second)
	peekItems := items(0)
	peek := take(t, s, peekItems...)
	r := take(t, s, items(30)...) // refused by export (10 + 1 left), admitted by the others alone
	if r.Allowed || r.Slots.ID != "" {
		t.Fatalf("rule: a request over one limit is refused and takes nothing: %+v", r)
	}
	for i, d := range r.Decisions {
		want := peek.Decisions[i]
		wantAllowed := i != 1
		if d.Allowed != wantAllowed || d.Remaining != want.Remaining || d.ResetAfter != want.ResetAfter {
			t.Errorf("rule: a refusal reports each item's state as it is (a peek's) and whether it alone would admit: item %d: got %+v, peek %+v, want allowed %v",
				i, d, want, wantAllowed)
		}
		if i != 1 && d.RetryAfter != 0 {
			t.Errorf("rule: an item that alone would admit reports no wait: item %d: %+v", i, d)
		}
	}
	if after := take(t, s, items(0)...); after.Decisions[0].Remaining != peek.Decisions[0].Remaining || after.Decisions[3].Remaining != 4 {
		t.Errorf("rule: a refused request takes nothing: before %+v, after %+v", peek.Decisions, after.Decisions)
	}
}

func testRetryAfterMax(t *testing.T, f Factory) {
	s, _ := open(t, f)
	a, b := spec(t, 1, 1), spec(t, 1, 0.25)
	take(t, s, store.Item{Key: "a", Spec: a, Cost: 1}, store.Item{Key: "b", Spec: b, Cost: 1})
	r := take(t, s, store.Item{Key: "a", Spec: a, Cost: 1}, store.Item{Key: "b", Spec: b, Cost: 1})
	if r.Allowed || r.Decisions[0].RetryAfter != time.Second || r.Decisions[1].RetryAfter != 4*time.Second {
		t.Fatalf("rule: each refusing item reports its own RetryAfter (1s, 4s): %+v", r)
	}
}

func testSlidingWindow(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 10, Window: time.Second}}
	it := store.Item{Key: "u", Spec: sp, Cost: 1}
	for range 10 {
		if !take(t, s, it).Allowed {
			t.Fatal("rule: a sliding window admits its limit within the window")
		}
	}
	r := take(t, s, it)
	if r.Allowed || r.Decisions[0].RetryAfter != 1100*time.Millisecond {
		t.Fatalf("rule: a sliding window refuses beyond its limit, with its exact RetryAfter: %+v", r)
	}
	c.Advance(1100 * time.Millisecond)
	if !take(t, s, it).Allowed {
		t.Fatal("rule: a sliding window admits after waiting RetryAfter exactly")
	}
}

// The fixed window (a baseline) resets at each boundary: twice its limit
// passes across one.
func testFixedWindow(t *testing.T, f Factory) {
	s, c := open(t, f)
	c.Set(Epoch.Add(900 * time.Millisecond))
	sp := &store.Spec{Kind: store.FixedWindow, Window: window.Limit{Limit: 5, Window: time.Second}}
	it := store.Item{Key: "f", Spec: sp, Cost: 5}
	if !take(t, s, it).Allowed {
		t.Fatal("rule: a fixed window admits its limit")
	}
	r := take(t, s, store.Item{Key: "f", Spec: sp, Cost: 1})
	if r.Allowed || r.Decisions[0].RetryAfter != 100*time.Millisecond {
		t.Fatalf("rule: a fixed window refuses beyond its limit until its end (RetryAfter 100ms): %+v", r)
	}
	c.Advance(100 * time.Millisecond)
	if !take(t, s, it).Allowed {
		t.Fatal("rule: a fixed window admits its limit again in the next window")
	}
}

// A calendar quota admits its limit per period (a day in UTC here) and
// refuses until exactly the next period's start; a refund counts within
// the period, and the next period starts anew.
func testQuota(t *testing.T, f Factory) {
	s, c := open(t, f)
	midnight := time.Date(Epoch.Year(), Epoch.Month(), Epoch.Day()+1, 0, 0, 0, 0, time.UTC)
	c.Set(midnight.Add(-90 * time.Minute))
	sp, err := store.NewSpec(store.Limit{Kind: store.Quota, Quota: quota.Limit{Limit: 3, Period: quota.Day}})
	if err != nil {
		t.Fatal(err)
	}
	it := store.Item{Key: "q", Spec: sp, Cost: 2}
	if r := take(t, s, it); !r.Allowed || r.Decisions[0].Remaining != 1 || r.Decisions[0].ResetAfter != 90*time.Minute {
		t.Fatalf("rule: a quota admits within its limit, full again at the period's end: %+v", r)
	}
	r := take(t, s, store.Item{Key: "q", Spec: sp, Cost: 2})
	if r.Allowed || r.Decisions[0].RetryAfter != 90*time.Minute || r.Decisions[0].Remaining != 1 {
		t.Fatalf("rule: a refused quota waits exactly to the next period's start: %+v", r)
	}
	items := []store.Item{{Key: "q", Spec: sp, Cost: 1}}
	if _, err := s.Take(context.Background(), items); err != nil || !items[0].Decision.Allowed {
		t.Fatalf("rule: the last unit is admitted: %+v %v", items[0].Decision, err)
	}
	if want := midnight.UnixNano(); items[0].RefundBefore != want {
		t.Fatalf("rule: a quota's cost can be returned until its period ends: RefundBefore %d, want %d", items[0].RefundBefore, want)
	}
	adj := []store.Adjustment{{Key: "q", Spec: sp, Delta: -1, RefundBefore: items[0].RefundBefore}}
	if err := s.Adjust(context.Background(), adj); err != nil {
		t.Fatal(err)
	}
	if r := take(t, s, store.Item{Key: "q", Spec: sp, Cost: 1}); !r.Allowed || r.Decisions[0].Remaining != 0 {
		t.Fatalf("rule: a refund within the period is returned exactly: %+v", r)
	}
	c.Set(midnight.Add(-1))
	if r := take(t, s, store.Item{Key: "q", Spec: sp, Cost: 1}); r.Allowed || r.Decisions[0].RetryAfter != 1 {
		t.Fatalf("rule: a nanosecond before the boundary the period is the old one: %+v", r)
	}
	c.Set(midnight)
	if r := take(t, s, store.Item{Key: "q", Spec: sp, Cost: 3}); !r.Allowed || r.Decisions[0].Remaining != 0 || r.Decisions[0].ResetAfter != 24*time.Hour {
		t.Fatalf("rule: the next period starts anew at its start: %+v", r)
	}
	if err := s.Adjust(context.Background(), adj); err != nil { // a refund for the old period
		t.Fatal(err)
	}
	if r := take(t, s, store.Item{Key: "q", Spec: sp, Cost: 1}); r.Allowed {
		t.Fatalf("rule: a refund for a past period returns nothing: %+v", r)
	}
}

func testConcurrency(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := &store.Spec{Kind: store.Concurrency, MaxInFlight: 2, SlotTTL: 30 * time.Second}
	it := store.Item{Key: "tools", Spec: sp, Cost: 1}
	l1 := take(t, s, it)
	c.Advance(time.Second)
	l2 := take(t, s, it)
	if !l1.Allowed || !l2.Allowed || l1.Slots.ID == l2.Slots.ID {
		t.Fatalf("rule: an in-flight cap of 2 admits 2, each with its own slot: %+v %+v", l1, l2)
	}
	r := take(t, s, it)
	if r.Allowed || r.Decisions[0].RetryAfter != 29*time.Second {
		t.Fatalf("rule: an in-flight cap refuses beyond its slots, RetryAfter the first slot's expiry (29s): %+v", r)
	}
	if err := s.Release(context.Background(), l1.Slots); err != nil {
		t.Fatal(err)
	}
	s.Release(context.Background(), l1.Slots) // twice: no error, no effect
	l3 := take(t, s, it)
	if !l3.Allowed {
		t.Fatalf("rule: a released slot is free again: %+v", l3)
	}
	if r := take(t, s, it); r.Allowed {
		t.Fatal("rule: releasing a slot twice frees one slot")
	}
	// A crashed holder's slot comes back after lease_ttl.
	c.Advance(30 * time.Second) // l2 expires (taken at 1 s); l3 (at 1 s) too
	if r := take(t, s, it); !r.Allowed || r.Decisions[0].Remaining != 1 {
		t.Fatalf("rule: a slot not released is free again at its TTL: %+v", r)
	}
}

// A renewed slot is kept past its TTL; an expired or released one
// is not revived. (For stores that implement store.Renewer.)
func testRenew(t *testing.T, f Factory) {
	s, c := open(t, f)
	r, ok := s.(store.Renewer)
	if !ok {
		t.Skipf("%T does not implement store.Renewer", s)
	}
	ctx := context.Background()
	sp := &store.Spec{Kind: store.Concurrency, MaxInFlight: 3, SlotTTL: 10 * time.Second}
	it := store.Item{Key: "calls", Spec: sp, Cost: 1}
	live := func() int64 {
		t.Helper()
		return sp.MaxInFlight - take(t, s, store.Item{Key: "calls", Spec: sp}).Decisions[0].Remaining
	}
	l1, l2 := take(t, s, it), take(t, s, it)
	if !l1.Allowed || !l2.Allowed {
		t.Fatalf("two slots: %+v %+v", l1, l2)
	}
	c.Advance(8 * time.Second)
	if err := r.Renew(ctx, l1.Slots, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Advance(4 * time.Second) // l2 expired at 10 s (and nothing pruned it yet); l1 lives to 18 s
	if err := r.Renew(ctx, l2.Slots, 10*time.Second); err != nil {
		t.Fatalf("renewing an expired slot is not an error: %v", err)
	}
	if n := live(); n != 1 {
		t.Fatalf("rule: a renewed slot is kept past its TTL, and an expired one is not revived by Renew: %d slots live, want 1", n)
	}
	s.Release(ctx, l1.Slots)
	if err := r.Renew(ctx, l1.Slots, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Fatalf("rule: a released slot is not revived by Renew: %d slots live", n)
	}
	if err := r.Renew(ctx, l1.Slots, 0); err == nil {
		t.Fatal("rule: a ttl of 0 is an error")
	}
	// A slot renewed for longer than the limit's slot TTL: a later take
	// reports the set's reset at the latest expiry, not at its own.
	l3 := take(t, s, it)
	if err := r.Renew(ctx, l3.Slots, time.Minute); err != nil {
		t.Fatal(err)
	}
	if l4 := take(t, s, it); !l4.Allowed || l4.Decisions[0].ResetAfter != time.Minute {
		t.Fatalf("rule: a take's ResetAfter is when the last slot expires (a renewed one, in 1m), not its own (10s): %+v", l4.Decisions[0])
	}
}

func testPeek(t *testing.T, f Factory) {
	s, _ := open(t, f)
	sp := spec(t, 5, 1)
	for range 3 {
		r := take(t, s, store.Item{Key: "p", Spec: sp})
		if !r.Allowed || r.Decisions[0].Remaining != 5 {
			t.Fatalf("rule: a peek (cost 0) reports the state and admits: %+v", r)
		}
	}
	if r := take(t, s, store.Item{Key: "p", Spec: sp, Cost: 5}); !r.Allowed || r.Decisions[0].Remaining != 0 {
		t.Fatalf("rule: peeks take nothing: a full take after them is admitted: %+v", r)
	}
}

func testInvalid(t *testing.T, f Factory) {
	s, _ := open(t, f)
	sp := spec(t, 5, 1)
	for _, items := range [][]store.Item{
		{{Key: "", Spec: sp, Cost: 1}},
		{{Key: "k", Cost: 1}},
		{{Key: "k", Spec: sp, Cost: -1}},
		{{Key: "k", Spec: sp, Cost: 6}},
		{{Key: "k", Spec: sp, Cost: 1}, {Key: "k", Spec: sp, Cost: 1}},
	} {
		if _, err := s.Take(context.Background(), items); !errors.Is(err, store.ErrInvalidItem) {
			t.Errorf("rule: an invalid item (no key, no spec, a bad cost, a key twice) is ErrInvalidItem: %+v: %v", items, err)
		}
	}
	if r := take(t, s, store.Item{Key: "k", Spec: sp}); r.Decisions[0].Remaining != 5 {
		t.Fatalf("rule: invalid items change nothing: %+v", r)
	}
}

// Concurrent mixed requests at a frozen instant never over-admit any
// bucket: each admits exactly what its capacity allows, and what every
// bucket reports left is its capacity minus what was admitted through it.
func testConcurrentExact(t *testing.T, f Factory) {
	s, _ := open(t, f)
	caps := []int64{50, 80, 120, 1000}
	specs := make([]*store.Spec, len(caps))
	for i, c := range caps {
		specs[i] = spec(t, c, 0.001)
	}
	var mu sync.Mutex
	taken := make([]int64, len(caps))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 300 {
				var items []store.Item
				var idx []int
				for i := range caps {
					if rng.IntN(2) == 0 {
						items = append(items, store.Item{Key: fmt.Sprint("k", i), Spec: specs[i], Cost: rng.Int64N(3) + 1})
						idx = append(idx, i)
					}
				}
				if len(items) == 0 {
					continue
				}
				r, err := s.Take(context.Background(), items)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					mu.Lock()
					for j, i := range idx {
						taken[i] += items[j].Cost
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for i, c := range caps {
		left := take(t, s, store.Item{Key: fmt.Sprint("k", i), Spec: specs[i]}).Decisions[0].Remaining
		if taken[i] > c || left != c-taken[i] {
			t.Errorf("rule: concurrent takes are exact: bucket %d: admitted %d of %d, reports %d left", i, taken[i], c, left)
		}
	}
}

// A random trace through the store gives the decisions of the pure
// transitions applied to one state per key (a reference with no eviction).
func testIdenticalToModel(t *testing.T, f Factory) {
	s, c := open(t, f)
	specs := []*store.Spec{spec(t, 10, 3), spec(t, 100, 1.0/7), spec(t, 7, 1e6)}
	type ref struct {
		tat, origin int64
		phase       uint64
		exists      bool
	}
	refs := map[string]*ref{}
	rng := rand.New(rand.NewPCG(5, 5))
	var now int64
	for step := range 3000 {
		now += rng.Int64N(int64(2 * time.Second))
		c.Set(Epoch.Add(time.Duration(now)))
		i := rng.IntN(len(specs))
		key := fmt.Sprint("m", i, "-", rng.IntN(3))
		sp := specs[i]
		cost := rng.Int64N(sp.Capacity() + 1)
		r := take(t, s, store.Item{Key: key, Spec: sp, Cost: cost})
		rf := refs[key]
		if rf == nil {
			rf = &ref{}
			refs[key] = rf
		}
		tat, origin, phase := store.BucketState(&sp.Bucket, rf.tat, rf.origin, rf.phase, rf.exists, now)
		nt, want := sp.Bucket.Step(tat, bucket.Instant{Elapsed: now - origin, Phase: phase}, cost)
		if r.Decisions[0] != want {
			t.Fatalf("rule: the store decides as the pure model (bucket.Params, store.BucketState): step %d key %s cost %d: store %+v, model %+v", step, key, cost, r.Decisions[0], want)
		}
		if want.Allowed && (cost > 0 || rf.exists) {
			*rf = ref{nt, origin, phase, true}
		}
	}
}
