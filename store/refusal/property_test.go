// Random traces on a manual clock: with the cache and without, one instance
// admits the same requests and reports the same decisions; with another
// instance returning tokens, the cache only refuses more, within the bound.

package refusal_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/refusal"
	"github.com/sluicehq/sluice/window"
)

var epoch = time.Unix(1_800_000_000, 0)

func mustSpec(t testing.TB, l store.Limit) *store.Spec {
	t.Helper()
	sp, err := store.NewSpec(l)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func bucketLimit(capacity int64, rate float64) store.Limit {
	return store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: capacity, Rate: rate}}
}

// family is the specs one key is decided under: its own, and overrides of
// it (decided with Base, as the limiter does on a store that converts).
type family struct {
	base      *store.Spec
	overrides []*store.Spec
}

func families(t testing.TB) []family {
	b := func(c int64, r float64) *store.Spec { return mustSpec(t, bucketLimit(c, r)) }
	blocked := bucketLimit(5, 2)
	blocked.BlockFor = 3 * time.Second
	return []family{
		{b(10, 3), []*store.Spec{b(20, 3), b(4, 1)}},
		{b(100, 1.0/7), []*store.Spec{b(100, 1)}},
		{b(7, 1e6), nil},
		{b(3, 0.5), []*store.Spec{b(3, 5)}},
		{mustSpec(t, blocked), nil},
		{mustSpec(t, store.Limit{Kind: store.FixedWindow, Window: window.Limit{Limit: 10, Window: 2 * time.Second}}), nil},
		{mustSpec(t, store.Limit{Kind: store.SlidingWindow, Window: window.Limit{Limit: 10, Window: 2 * time.Second}}), nil},
		{mustSpec(t, store.Limit{Kind: store.Quota, Quota: quota.Limit{Limit: 20, Period: quota.Day}}), nil},
		{&store.Spec{Kind: store.Concurrency, MaxInFlight: 2, SlotTTL: time.Second}, nil},
	}
}

// wholeNanos reports whether sp's token is a whole number of nanoseconds
// (not a token bucket: whole).
func wholeNanos(sp *store.Spec) bool {
	if sp.Rate() == 0 {
		return true
	}
	num, den, _ := sp.Bucket.Ratio()
	return uint64(sp.Bucket.Unit())*den%num == 0
}

// op is one step of a trace, replayed against each world.
type op struct {
	advance time.Duration
	items   []store.Item
	adjust  []store.Adjustment
	release bool
}

// trace makes n random steps: mostly floods of single-item requests on a
// few keys (repeats of a refused cost, smaller and larger costs, peeks,
// bookings), some multi-item requests, settles, refunds, pauses and
// ceilings, and time moving by up to 2 s.
func trace(t testing.TB, rng *rand.Rand, n int) []op {
	fams := families(t)
	ops := make([]op, 0, n)
	item := func() store.Item {
		f := rng.IntN(len(fams))
		fam := fams[f]
		it := store.Item{Key: fmt.Sprint("k", f, "-", rng.IntN(2)), Spec: fam.base}
		if len(fam.overrides) > 0 && rng.IntN(8) == 0 {
			it.Spec, it.Base = fam.overrides[rng.IntN(len(fam.overrides))], fam.base
		}
		capacity := it.Spec.Capacity()
		if it.Base != nil {
			capacity = min(capacity, it.Base.Capacity())
		}
		switch rng.IntN(10) {
		case 0:
			it.Cost = 0
		case 1, 2:
			it.Cost = rng.Int64N(capacity) + 1
		default:
			it.Cost = min(capacity, 1+int64(f%3))
		}
		if rng.IntN(6) == 0 {
			it.MaxWait = time.Duration(rng.Int64N(int64(3 * time.Second)))
		}
		return it
	}
	for range n {
		var o op
		if rng.IntN(4) == 0 {
			o.advance = time.Duration(rng.Int64N(int64(2 * time.Second)))
		} else if rng.IntN(3) == 0 {
			o.advance = time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
		}
		switch r := rng.IntN(20); {
		case r == 0:
			it := item()
			o.adjust = []store.Adjustment{{Key: it.Key, Spec: it.Spec, Base: it.Base, Delta: -rng.Int64N(4) - 1, RefundBefore: -1}}
		case r == 1:
			it := item()
			o.adjust = []store.Adjustment{{Key: it.Key, Spec: it.Spec, Base: it.Base, Delta: rng.Int64N(4) + 1}}
		case r == 2:
			it := item()
			o.adjust = []store.Adjustment{{Key: it.Key, Spec: it.Spec, Base: it.Base, Pause: time.Duration(rng.Int64N(int64(3 * time.Second)))}}
		case r == 3:
			it := item()
			o.adjust = []store.Adjustment{{Key: it.Key, Spec: it.Spec, Base: it.Base, Lower: true, Delta: rng.Int64N(3)}}
		case r == 4:
			a, b := item(), item()
			if a.Key != b.Key {
				b.MaxWait = a.MaxWait
				o.items = []store.Item{a, b}
			} else {
				o.items = []store.Item{a}
			}
		case r == 5:
			o.release = true
		default:
			o.items = []store.Item{item()}
		}
		ops = append(ops, o)
	}
	return ops
}

// world is a store under test on its own clock, with what it took (to
// settle: a refund of RefundBefore -1 means "the last admission's").
type world struct {
	st    store.Store
	clock *sluice.ManualClock
	last  map[string]int64 // key -> RefundBefore of its last admission
	slots []store.Slots
}

func newWorld(cache int) *world {
	c := sluice.NewManualClock(epoch)
	var st store.Store = memstore.New(memstore.WithClock(c))
	if cache > 0 {
		st = refusal.New(st, cache, refusal.WithClock(c))
	}
	return &world{st: st, clock: c, last: map[string]int64{}}
}

// step replays o and returns what the store answered.
func (w *world) step(t testing.TB, o op) (store.Result, []store.Item) {
	t.Helper()
	w.clock.Advance(o.advance)
	ctx := context.Background()
	switch {
	case o.release:
		if len(w.slots) > 0 {
			if err := w.st.Release(ctx, w.slots[0]); err != nil {
				t.Fatal(err)
			}
			w.slots = w.slots[1:]
		}
		return store.Result{}, nil
	case o.adjust != nil:
		adj := append([]store.Adjustment(nil), o.adjust...)
		for i := range adj {
			if adj[i].RefundBefore == -1 {
				adj[i].RefundBefore = w.last[adj[i].Key]
			}
		}
		if err := w.st.Adjust(ctx, adj); err != nil {
			t.Fatal(err)
		}
		return store.Result{}, nil
	}
	items := append([]store.Item(nil), o.items...)
	r, err := w.st.Take(ctx, items)
	if err != nil {
		return store.Result{Allowed: false, Wait: -1}, items // (an error: the same in both)
	}
	if r.Allowed {
		for _, it := range items {
			w.last[it.Key] = it.RefundBefore
		}
		if r.Slots.ID != "" {
			w.slots = append(w.slots, r.Slots)
		}
	}
	return r, items
}

// With one instance, the cache changes no answer: the same admissions and
// refusals, every item's decision equal field by field (RetryAfter and
// ResetAfter counted down, Remaining refilled; under a rate whose token is
// not a whole number of nanoseconds RetryAfter may be a nanosecond short),
// on a trace where many refusals are answered from the cache.
func TestSameAnswersAsTheStore(t *testing.T) {
	for seed := range uint64(24) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 27))
			ops := trace(t, rng, 6000)
			plain, cached := newWorld(0), newWorld(1000)
			refused, nsShort := 0, 0
			for i, o := range ops {
				r1, it1 := plain.step(t, o)
				r2, it2 := cached.step(t, o)
				if r1.Allowed != r2.Allowed || r1.Wait != r2.Wait || len(r1.Slots.Keys) != len(r2.Slots.Keys) {
					t.Fatalf("step %d %+v: store %+v, cache %+v", i, o.items, r1, r2)
				}
				if o.items != nil && !r1.Allowed {
					refused++
				}
				for j := range it1 {
					a, b := it1[j], it2[j]
					d := b.Decision
					if diff := a.Decision.RetryAfter - d.RetryAfter; diff == 1 && !wholeNanos(a.Spec) {
						// (a token of a fraction of a nanosecond: the cache
						// tells the earlier of the store's two possible waits)
						d.RetryAfter = a.Decision.RetryAfter
						nsShort++
					}
					if a.Decision != d || a.RefundBefore != b.RefundBefore || a.Wait != b.Wait {
						t.Fatalf("step %d item %d (%s cost %d max_wait %v spec %v base %v): store %+v (refund %d wait %v), cache %+v (refund %d wait %v)",
							i, j, a.Key, a.Cost, a.MaxWait, a.Spec.Kind, a.Base != nil, a.Decision, a.RefundBefore, a.Wait, b.Decision, b.RefundBefore, b.Wait)
					}
				}
			}
			st := cached.st.(*refusal.Store).Stats()
			t.Logf("%d refusals, %d answered from the cache (%d a nanosecond short), %d kept, %d dropped", refused, st.Hits, nsShort, st.Kept, st.Dropped)
			if st.Hits < uint64(refused)/4 {
				t.Fatalf("only %d of %d refusals answered from the cache", st.Hits, refused)
			}
		})
	}
}
