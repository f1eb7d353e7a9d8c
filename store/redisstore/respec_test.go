// Spec changes on a key (store.Item.Base) on Redis: identity with memstore, no burst, the marker format, the limiter over overrides.

package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

// family is a limit's usual spec and the specs overrides give some of its
// keys (first: the usual one itself).
type family []*store.Spec

func bucketFamily(t testing.TB, ls ...bucket.Limit) family {
	t.Helper()
	var f family
	for _, l := range ls {
		sp, err := store.NewBucketSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		f = append(f, sp)
	}
	return f
}

// respecFamilies are limits with spec changes of every sort: raised,
// lowered, a rate change alone, whole and binary units, the double and
// the limb path, a penalty box, windows of one length and of another, a
// quota of another period.
func respecFamilies(t testing.TB) []family {
	fs := []family{
		bucketFamily(t, bucket.Limit{Capacity: 10, Rate: 1}, bucket.Limit{Capacity: 100, Rate: 10},
			bucket.Limit{Capacity: 3, Rate: 1}, bucket.Limit{Capacity: 10, Rate: 50}, bucket.Limit{Capacity: 10, Rate: 0.1}),
		bucketFamily(t, bucket.PerMinute(100), bucket.PerMinute(1000), bucket.PerHour(50), bucket.Limit{Capacity: 7, Rate: 0.7}),
		bucketFamily(t, bucket.Limit{Capacity: 7, Rate: math.Nextafter(0.7, 1)}, bucket.Limit{Capacity: 70, Rate: 7},
			bucket.Limit{Capacity: 5, Rate: math.Nextafter(1.0/7, 0)}, bucket.Limit{Capacity: 1 << 40, Rate: 999_999_937}),
		bucketFamily(t, bucket.Limit{Capacity: 1_000_000, Rate: 1e6}, bucket.Limit{Capacity: 1000, Rate: 100},
			bucket.Limit{Capacity: 1 << 30, Rate: math.Nextafter(1e9, 0)}),
	}
	blocked := family{}
	for _, sp := range fs[0] {
		c := *sp
		c.BlockFor = 2 * time.Second
		blocked = append(blocked, &c)
	}
	fs = append(fs, blocked)
	win := func(k store.Kind, n int64, w time.Duration) *store.Spec {
		return &store.Spec{Kind: k, Window: window.Limit{Limit: n, Window: w}}
	}
	fs = append(fs,
		family{win(store.SlidingWindow, 10, time.Second), win(store.SlidingWindow, 100, time.Second), win(store.SlidingWindow, 3, time.Second), win(store.SlidingWindow, 10, time.Minute)},
		family{win(store.FixedWindow, 5, time.Second), win(store.FixedWindow, 50, time.Second), win(store.FixedWindow, 5, 10*time.Second)},
		family{{Kind: store.Quota, Quota: quota.Limit{Limit: 50, Period: quota.Day}}, {Kind: store.Quota, Quota: quota.Limit{Limit: 500, Period: quota.Day}},
			{Kind: store.Quota, Quota: quota.Limit{Limit: 50, Period: quota.Month}}})
	return fs
}

// item is key k of family f decided under its spec v (Base: the usual
// spec, when v is another).
func (f family) item(k string, v int, cost int64) store.Item {
	it := store.Item{Key: k, Spec: f[v], Cost: min(cost, f[v].Capacity())}
	if v > 0 {
		it.Base = f[0]
	}
	return it
}

// The same random trace through memstore and redisstore, where each
// key's spec changes at random between its limit's usual spec and the
// specs of overrides (raised, lowered, another rate or unit, into and out
// of debt, with settles, pauses and bookings under either), gives identical
// decisions, item by item: the script converts a key's state by
// memstore's rule.
func TestSpecChangesIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	testSpecChanges(t, open(t, redisstore.WithScriptClock(clock)), clock, 3000, 11)
}

// The same on the Cluster (keys on every master).
func TestClusterSpecChangesIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	testSpecChanges(t, openCluster(t, redisstore.WithScriptClock(clock)), clock, 800, 12)
}

func testSpecChanges(t *testing.T, rs *redisstore.Store, clock *sluice.ManualClock, steps int, seed uint64) {
	ms := memstore.New(memstore.WithClock(clock))
	fams := respecFamilies(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	ctx := context.Background()
	dts := []time.Duration{0, 1, 999, time.Millisecond, 37 * time.Millisecond, 300 * time.Millisecond, time.Second, 70 * time.Second, time.Hour}
	refund := map[string]int64{}
	converted := 0
	for step := range steps {
		clock.Advance(dts[rng.IntN(len(dts))] + time.Duration(rng.Int64N(1000)))
		fi := rng.IntN(len(fams))
		f := fams[fi]
		key := fmt.Sprint("f", fi, "k", rng.IntN(2))
		v := rng.IntN(len(f))
		if rng.IntN(3) == 0 {
			v = 0
		}
		if v > 0 {
			converted++
		}
		if rng.IntN(6) == 0 { // settle or pause under the spec in force
			it := f.item(key, v, 1)
			adj := store.Adjustment{Key: key, Spec: it.Spec, Base: it.Base, RefundBefore: refund[key]}
			switch rng.IntN(4) {
			case 0:
				adj.Delta = -(rng.Int64N(5) + 1)
			case 1:
				adj.Delta = it.Spec.Capacity() * 3 // deep into debt
			case 2:
				adj.Pause = time.Duration(rng.Int64N(3000)+1) * time.Millisecond
			default:
				adj.Delta = rng.Int64N(10) + 1
			}
			for _, s := range []store.Store{ms, rs} {
				if err := s.Adjust(ctx, []store.Adjustment{adj}); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		cost := rng.Int64N(4)
		if rng.IntN(4) == 0 {
			cost = rng.Int64N(f[v].Capacity() + 1)
		}
		a := []store.Item{f.item(key, v, cost)}
		if f[0].Kind == store.TokenBucket && rng.IntN(8) == 0 { // a booking
			a[0].MaxWait = time.Duration(rng.Int64N(3000)) * time.Millisecond
		} else if rng.IntN(4) == 0 { // a second key in the request, of another family
			g := fams[(fi+1)%len(fams)]
			a = append(a, g.item(fmt.Sprint("f", (fi+1)%len(fams), "k", 0), rng.IntN(len(g)), 1))
		}
		b := append([]store.Item(nil), a...)
		ra, err := ms.Take(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := rs.Take(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if ra.Allowed != rb.Allowed {
			for i := range a {
				t.Logf("item %d %s spec %+v base %v cost %d: memstore %+v redis %+v", i, a[i].Key, a[i].Spec.Bucket.Limit(), a[i].Base != nil, a[i].Cost, a[i].Decision, b[i].Decision)
			}
			t.Fatalf("step %d: memstore %v, redis %v", step, ra.Allowed, rb.Allowed)
		}
		for i := range a {
			if a[i].Decision != b[i].Decision || a[i].RefundBefore != b[i].RefundBefore || a[i].Wait != b[i].Wait {
				t.Fatalf("step %d item %d (%s, spec %d of family %d, base %v): memstore %+v %d %v, redis %+v %d %v",
					step, i, a[i].Key, v, fi, a[i].Base != nil, a[i].Decision, a[i].RefundBefore, a[i].Wait, b[i].Decision, b[i].RefundBefore, b[i].Wait)
			}
			if a[i].RefundBefore != 0 {
				refund[a[i].Key] = a[i].RefundBefore
			}
		}
	}
	if converted < steps/3 {
		t.Fatalf("only %d of %d steps under an override's spec", converted, steps)
	}
}

// On Redis (single and Cluster), raising an exhausted bucket's capacity
// from 10 to 100 hands out nothing at once; it refills at the new rate;
// going back to 10 drops the tokens above it; debt is kept across a
// change.
func TestSpecChangeNoBurst(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(*testing.T, ...redisstore.Option) *redisstore.Store
	}{{"single", func(t *testing.T, o ...redisstore.Option) *redisstore.Store { return open(t, o...) }}, {"cluster", openCluster}} {
		t.Run(c.name, func(t *testing.T) {
			clock := sluice.NewManualClock(storetest.Epoch)
			s := c.open(t, redisstore.WithScriptClock(clock))
			if !s.ConvertsSpecs() {
				t.Fatal("the Redis store converts specs")
			}
			f := bucketFamily(t, bucket.Limit{Capacity: 10, Rate: 1}, bucket.Limit{Capacity: 100, Rate: 10})
			ctx := context.Background()
			take := func(v, n int) int {
				got := 0
				for range n {
					r, err := s.Take(ctx, []store.Item{f.item("acme", v, 1)})
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed {
						got++
					}
				}
				return got
			}
			if n := take(0, 20); n != 10 {
				t.Fatalf("%d of 20 admitted by a bucket of 10", n)
			}
			if n := take(1, 5); n != 0 {
				t.Fatalf("raised to 100: %d admitted at once from an exhausted bucket (a burst)", n)
			}
			clock.Advance(time.Second)
			if n := take(1, 30); n != 10 {
				t.Fatalf("a second at the raised 10/s: %d admitted, want 10", n)
			}
			clock.Advance(20 * time.Second)
			if n := take(1, 50); n != 50 {
				t.Fatalf("%d admitted of the 100 held", n)
			}
			if n := take(0, 20); n != 10 {
				t.Fatalf("lowered back to 10 from 50 held: %d admitted, want 10 (tokens above the capacity dropped)", n)
			}
			// debt: 10 more charged on the usual spec, kept under the raised one
			if err := s.Adjust(ctx, []store.Adjustment{{Key: "acme", Spec: f[0], Delta: 10}}); err != nil {
				t.Fatal(err)
			}
			if n := take(1, 5); n != 0 { // (converted now: a debt of 10)
				t.Fatalf("in debt of 10 when raised: %d admitted, want 0", n)
			}
			clock.Advance(time.Second) // 10 tokens at 10/s pay the debt of 10
			if n := take(1, 5); n != 0 {
				t.Fatalf("in debt of 10 when raised: %d admitted after a second at 10/s, want 0", n)
			}
			clock.Advance(100 * time.Millisecond)
			if n := take(1, 5); n != 1 {
				t.Fatalf("debt paid, 100 ms at 10/s: %d admitted, want 1", n)
			}
		})
	}
}

// A state written without a spec marker (by the usual spec: as every
// state written before markers existed) is read as the usual spec's, and
// converted from it when an override's spec decides its key; the
// override's writes carry the marker, which the usual spec's next write
// drops again.
func TestSpecMarkerFormat(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	s := open(t, redisstore.WithScriptClock(clock))
	f := bucketFamily(t, bucket.Limit{Capacity: 10, Rate: 1}, bucket.Limit{Capacity: 100, Rate: 10})
	ctx := context.Background()
	key := s.Key(store.TokenBucket, "m")
	get := func() string {
		v, err := s.Client().Do(ctx, s.Client().B().Get().Key(key).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for range 4 {
		if _, err := s.Take(ctx, []store.Item{f.item("m", 0, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if v := get(); strings.HasPrefix(v, "@") {
		t.Fatalf("the usual spec writes no marker: %q", v)
	}
	it := []store.Item{f.item("m", 1, 1)}
	r, err := s.Take(ctx, it)
	if err != nil || !r.Allowed || it[0].Decision.Remaining != 5 {
		t.Fatalf("raised with 6 held: %+v %v, want 5 left", r, err)
	}
	if v := get(); !strings.HasPrefix(v, "@5") {
		t.Fatalf("an override's write carries its spec's marker: %q", v)
	}
	it = []store.Item{f.item("m", 0, 1)}
	r, err = s.Take(ctx, it)
	if err != nil || !r.Allowed || it[0].Decision.Remaining != 4 {
		t.Fatalf("back to the usual spec with 5 held: %+v %v, want 4 left", r, err)
	}
	if v := get(); strings.HasPrefix(v, "@") {
		t.Fatalf("the usual spec's write drops the marker: %q", v)
	}
}

// The limiter on Redis decides an overridden key on the policy's key with
// the override's spec: raising an exhausted bucket from 10 to 100 (1/s
// to 10/s) hands out nothing at once, refills at the new rate, and
// deleting the override drops the tokens above the policy's capacity; on
// the Cluster too.
func TestLimiterOverrideNoBurst(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: api
    key: "t:{tenant}"
    capacity: 10
    refill_per_second: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		open func(*testing.T, ...redisstore.Option) *redisstore.Store
	}{{"single", func(t *testing.T, o ...redisstore.Option) *redisstore.Store { return open(t, o...) }}, {"cluster", openCluster}} {
		t.Run(c.name, func(t *testing.T) {
			clock := sluice.NewManualClock(storetest.Epoch)
			set := overrides.NewSet(p)
			l, err := limiter.New(p, c.open(t, redisstore.WithScriptClock(clock)), limiter.WithOverrides(set))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			d := map[string]string{"tenant": "acme"}
			admitted := func(n int) int {
				got := 0
				for range n {
					res, err := l.Check(ctx, limiter.Request{Descriptors: d})
					if err != nil {
						t.Fatal(err)
					}
					if res.Allowed {
						got++
					}
				}
				return got
			}
			if n := admitted(20); n != 10 {
				t.Fatalf("%d admitted by a bucket of 10, want 10", n)
			}
			if err := set.Put(&overrides.Override{Name: "api", Match: d, Params: overrides.Params{Capacity: 100, RefillPerSecond: 10}}); err != nil {
				t.Fatal(err)
			}
			if n := admitted(5); n != 0 {
				t.Fatalf("raised to 100: %d admitted at once from an exhausted bucket, want 0 (a burst)", n)
			}
			clock.Advance(time.Second)
			if n := admitted(30); n != 10 {
				t.Fatalf("a second at the raised rate of 10/s: %d admitted, want 10", n)
			}
			clock.Advance(10 * time.Second)
			if n := admitted(150); n != 100 {
				t.Fatalf("after 10 s at 10/s: %d admitted, want the raised capacity 100", n)
			}
			clock.Advance(10 * time.Second)
			if err := set.Delete("api", d); err != nil {
				t.Fatal(err)
			}
			if n := admitted(30); n != 10 {
				t.Fatalf("lowered back to 10 from a full 100: %d admitted, want 10 (tokens above the capacity dropped)", n)
			}
			clock.Advance(time.Second)
			if n := admitted(5); n != 1 {
				t.Fatalf("a second at the policy's 1/s: %d admitted, want 1", n)
			}
		})
	}
}
