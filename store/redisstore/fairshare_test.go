package redisstore_test

import (
	"context"
	"fmt"
	"github.com/sluicehq/sluice/store/memstore"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// shareSpec is a fair-share token bucket: capacity, refill per second,
// active window and max_tenants.
func shareSpec(t testing.TB, capacity int64, rate float64, window time.Duration, maxTenants int) *store.Spec {
	t.Helper()
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: capacity, Rate: rate},
		FairShare: store.FairShare{ActiveWindow: window, MaxTenants: maxTenants}})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// shareRun drives two store instances on one Redis (alternating by the
// ms) with the script's manual clock: at each ms, every tenant whose
// period divides the ms (and whose [from, to) holds it) asks for one
// token; it returns what each tenant asked and was admitted, counted in
// the ms range [countFrom, countTo).
type shareTenant struct {
	name       string
	weight     uint32
	every      int // ms between requests
	from, to   int // ms range in which it asks
	asked, got int
}

func shareRun(t *testing.T, stores [2]store.Store, clock *sluice.ManualClock, sp *store.Spec, ms, countFrom, countTo int, ts []*shareTenant) {
	t.Helper()
	ctx := context.Background()
	for step := range ms {
		clock.Advance(time.Millisecond)
		for j := range ts {
			tn := ts[(j+step)%len(ts)] // (the order turns, so no tenant always asks first)
			if step < tn.from || step >= tn.to || step%tn.every != 0 {
				continue
			}
			items := []store.Item{{Key: "provider", Spec: sp, Cost: 1, Tenant: tn.name, Weight: tn.weight}}
			res, err := stores[step%2].Take(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			if step >= countFrom && step < countTo {
				tn.asked++
				if res.Allowed {
					tn.got++
				}
			}
		}
	}
}

// The proof of fair shares on one Redis shared by two instances
// (the script's manual clock; B = 100, r = 100/s, active_window 1 s):
// tenant A floods at 10x the refill while B and C each send 20 % of it,
// for 5 s: B and C are admitted (at least 98 % of what they asked), A
// gets the rest, and the total stays within B + r·t. Then B and C stop:
// one active window later A alone gets at least 95 % of the refill.
func TestFairShareTwoInstances(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	pre := redisstore.WithPrefix(prefix())
	var stores [2]store.Store
	for i := range stores {
		stores[i] = open(t, redisstore.WithScriptClock(clock), pre)
	}
	sp := shareSpec(t, 100, 100, time.Second, 10_000)
	const phase = 5000
	// The same trace without the fair share: A's flood takes B's and C's
	// tokens (what the share prevents), on keys of their own.
	plain := mustSpec(t, 100, 100)
	var others [2]store.Store
	pre2 := redisstore.WithPrefix(prefix())
	for i := range others {
		others[i] = open(t, redisstore.WithScriptClock(clock), pre2)
	}
	pa, pb, pc := &shareTenant{name: "A", every: 1, to: 1 << 30}, &shareTenant{name: "B", every: 50, to: phase}, &shareTenant{name: "C", every: 50, to: phase}
	shareRun(t, others, clock, plain, phase, 0, phase, []*shareTenant{pa, pb, pc})
	t.Logf("without fair_share, same trace: A %d/%d, B %d/%d, C %d/%d", pa.got, pa.asked, pb.got, pb.asked, pc.got, pc.asked)
	if pb.got*100 >= pb.asked*98 {
		t.Errorf("without a fair share B got %d of %d: the trace does not contend", pb.got, pb.asked)
	}
	a := &shareTenant{name: "A", every: 1, from: 0, to: 1 << 30}
	b := &shareTenant{name: "B", every: 50, from: 0, to: phase}
	c := &shareTenant{name: "C", every: 50, from: 0, to: phase}
	shareRun(t, stores, clock, sp, phase, 0, phase, []*shareTenant{a, b, c})
	total, bound := a.got+b.got+c.got, 100+100*phase/1000
	t.Logf("contended, 5 s: A %d/%d, B %d/%d, C %d/%d, total %d (r·t %d, B + r·t %d)", a.got, a.asked, b.got, b.asked, c.got, c.asked, total, 100*phase/1000, bound)
	for _, x := range []*shareTenant{b, c} {
		if x.got*100 < x.asked*98 {
			t.Errorf("%s admitted %d of %d, want at least 98 %%", x.name, x.got, x.asked)
		}
	}
	if total > bound {
		t.Errorf("admitted %d, more than B + r·t = %d", total, bound)
	}
	if total < 100*phase/1000*95/100 {
		t.Errorf("admitted %d, want at least 95 %% of r·t = %d (A gets the rest)", total, 100*phase/1000)
	}
	// B and C stop: from one active window on, A alone has the refill.
	a.asked, a.got = 0, 0
	shareRun(t, stores, clock, sp, 1000, 0, 1000, []*shareTenant{a})
	t.Logf("A alone, the first active window (1 s) after B and C stopped: %d/%d admitted (r·t %d)", a.got, a.asked, 100)
	a.asked, a.got = 0, 0
	shareRun(t, stores, clock, sp, 2000, 0, 2000, []*shareTenant{a})
	t.Logf("A alone, the next 2 s: %d/%d admitted (r·t %d)", a.got, a.asked, 200)
	if a.got < 200*95/100 {
		t.Errorf("A alone got %d in 2 s, want at least 95 %% of the refill (200)", a.got)
	}
}

// Weights 3:1, both tenants flooding at 10x the refill on two instances:
// the shares of what is admitted are within ±5 % of 3:1 (75 % and 25 %),
// counted after the first active window.
func TestFairShareWeights(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	pre := redisstore.WithPrefix(prefix())
	var stores [2]store.Store
	for i := range stores {
		stores[i] = open(t, redisstore.WithScriptClock(clock), pre)
	}
	sp := shareSpec(t, 100, 100, time.Second, 10_000)
	a := &shareTenant{name: "acme", weight: 3, every: 1, to: 1 << 30}
	d := &shareTenant{name: "dune", weight: 1, every: 1, to: 1 << 30}
	shareRun(t, stores, clock, sp, 6000, 1000, 6000, []*shareTenant{a, d})
	total := a.got + d.got
	share := float64(a.got) / float64(total)
	t.Logf("weights 3:1, both at 10x, 5 s after the first: acme %d, dune %d of %d admitted (acme %.1f %%, want 75 %%)", a.got, d.got, total, 100*share)
	if share < 0.75*0.95 || share > 0.75*1.05 || float64(d.got)/float64(total) < 0.25*0.95 || float64(d.got)/float64(total) > 0.25*1.05 {
		t.Errorf("acme %d, dune %d: shares %.3f and %.3f, want 0.75 and 0.25 within ±5 %%", a.got, d.got, share, 1-share)
	}
}

// The fair-share conformance cases (storetest.RunFairShare) on Redis and
// on a Redis Cluster.
func TestFairShareConformance(t *testing.T) {
	storetest.RunFairShare(t, func(t *testing.T, c sluice.Clock) store.Store {
		return open(t, redisstore.WithScriptClock(c))
	})
}

func TestClusterFairShareConformance(t *testing.T) {
	storetest.RunFairShare(t, func(t *testing.T, c sluice.Clock) store.Store {
		return openCluster(t, redisstore.WithScriptClock(c))
	})
}

// memstore and Redis decide fair shares identically: a random trace of
// requests of several tenants (weights 0 to 3, the "other" holder, tenants
// per priority class as the limiter names them) on fair-share buckets of
// the double and the limb path, one with a penalty box, with max_tenants
// small enough that tenants fold into "other", steps across the active
// window (holders expire), peeks, bookings with a MaxWait, priority
// classes (Item.Reserve), plain items alongside (all or nothing) and
// refunds; decisions, waits and refund times item by item.
func TestFairSharesIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	sharesIdentical(t, clock, open(t, redisstore.WithScriptClock(clock)), 12000)
}

// On a Redis Cluster, where a request's items are in several hash slots
// (taken slot by slot, and undone when one refuses: the virtual times its
// shares wrote too), the same.
func TestClusterFairSharesIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	sharesIdentical(t, clock, openCluster(t, redisstore.WithScriptClock(clock)), 6000)
}

func sharesIdentical(t *testing.T, clock *sluice.ManualClock, rs *redisstore.Store, n int) {
	ms := memstore.New(memstore.WithClock(clock))
	specs := []*store.Spec{
		shareSpec(t, 10, 10, time.Second, 3),
		shareSpec(t, 100, 1000, 300*time.Millisecond, 10_000),
		shareSpec(t, 7, limbRate, 2*time.Second, 2), // the limb path
		shareSpec(t, 1000, 100, 5*time.Second, 4),
	}
	blocked := *specs[0]
	blocked.BlockFor = 700 * time.Millisecond
	specs = append(specs, &blocked)
	plain := mustSpec(t, 20, 20)
	tenants := []string{"", "a", "b", "c", "d", "e", "f", "g", "interactive\x1fa", "batch\x1fa"}
	rng := rand.New(rand.NewPCG(28, 5))
	ctx := context.Background()
	steps := []time.Duration{0, 0, 1, time.Microsecond, time.Millisecond, time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond, 20 * time.Millisecond}
	var admitted, refused, booked, shareRefused int
	var last []store.Item
	for step := range n {
		step1 := steps[rng.IntN(len(steps))]
		if rng.IntN(40) == 0 { // now and then across an active window
			step1 = []time.Duration{400 * time.Millisecond, 3 * time.Second}[rng.IntN(2)]
		}
		clock.Advance(step1 + time.Duration(rng.Int64N(1000)))
		mw := time.Duration(0)
		if rng.IntN(4) == 0 {
			mw = []time.Duration{time.Millisecond, 300 * time.Millisecond, 2 * time.Second}[rng.IntN(3)]
		}
		reserve := []uint32{0, 0, 0, 200_000, 500_000}[rng.IntN(5)]
		var a []store.Item
		for j, sp := range specs {
			if rng.IntN(3) != 0 {
				continue
			}
			cost := rng.Int64N(min(sp.Capacity()/2, 30) + 2)
			if rng.IntN(8) == 0 {
				cost = 0 // a peek
			}
			a = append(a, withinClass(store.Item{Key: fmt.Sprint("fs", j, "-", rng.IntN(2)), Spec: sp, Cost: cost,
				Tenant: tenants[rng.IntN(len(tenants))>>(rng.IntN(2)*8)], Weight: uint32(rng.IntN(4)), MaxWait: mw, Reserve: reserve}))
		}
		if rng.IntN(4) == 0 {
			a = append(a, withinClass(store.Item{Key: "plain", Spec: plain, Cost: rng.Int64N(8), MaxWait: mw, Reserve: reserve}))
		}
		if len(a) == 0 {
			continue
		}
		if len(last) > 0 && rng.IntN(8) == 0 { // refund the last admission (a refund never moves a virtual time)
			var adj []store.Adjustment
			for _, it := range last {
				adj = append(adj, store.Adjustment{Key: it.Key, Spec: it.Spec, Delta: -it.Cost, RefundBefore: it.RefundBefore})
			}
			if err := ms.Adjust(ctx, adj); err != nil {
				t.Fatal(err)
			}
			if err := rs.Adjust(ctx, adj); err != nil {
				t.Fatal(err)
			}
			last = nil
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
		if ra.Allowed != rb.Allowed || ra.Wait != rb.Wait {
			t.Fatalf("step %d: memstore %+v, redis %+v (items: memstore %+v, redis %+v)", step, ra, rb, a, b)
		}
		for i := range a {
			if a[i].Decision != b[i].Decision || a[i].Wait != b[i].Wait || a[i].RefundBefore != b[i].RefundBefore {
				t.Fatalf("step %d item %s tenant %q weight %d cost %d wait %v reserve %d: memstore %+v %v (%d), redis %+v %v (%d)", step, a[i].Key, a[i].Tenant, a[i].Weight, a[i].Cost, mw, a[i].Reserve,
					a[i].Decision, a[i].Wait, a[i].RefundBefore, b[i].Decision, b[i].Wait, b[i].RefundBefore)
			}
		}
		for i := range a {
			if d := a[i].Decision; a[i].Spec.FairShare != nil && !d.Allowed && a[i].Cost > 0 && d.Remaining >= a[i].Cost {
				shareRefused++ // (the bucket held the cost: the share refused it)
			}
		}
		if ra.Allowed {
			admitted++
			last = a
			if ra.Wait > 0 {
				booked++
			}
		} else {
			refused++
		}
	}
	t.Logf("%d admitted (%d booked with a wait), %d refused (%d items by their share)", admitted, booked, refused, shareRefused)
	if admitted < 500 || refused < 500 || booked < 50 || shareRefused < 100 {
		t.Fatalf("the trace does not exercise the shares: %d admitted, %d booked, %d refused, %d by a share", admitted, booked, refused, shareRefused)
	}
}

// A tenant set's keys are in its bucket's hash slot whatever the key: with
// a hash tag, without one, with braces that make none.
func TestShareKeysInTheBucketsSlot(t *testing.T) {
	for _, k := range []string{"sluice:b:p@u1:provider", "sluice:b:{acme}x@u1:tenant:acme", "{}x", "a}b{c", "x{", "}{}", "{a}", "p{}{b}", "}", "{"} {
		h, z := redisstore.ShareKeysForTest(k)
		if redisstore.HashSlot(h) != redisstore.HashSlot(k) || redisstore.HashSlot(z) != redisstore.HashSlot(k) || h == z || h == k || z == k {
			t.Errorf("key %q (slot %d): set keys %q (slot %d) and %q (slot %d)", k, redisstore.HashSlot(k), h, redisstore.HashSlot(h), z, redisstore.HashSlot(z))
		}
	}
}

// A tenant set forgets its holders once their active window has passed
// (amortised: the next touch removes them, with their weights), and on
// Redis's clock both its keys expire with the longer of the bucket's and
// the active window.
func TestShareSetExpiry(t *testing.T) {
	ctx := context.Background()
	clock := sluice.NewManualClock(storetest.Epoch)
	s := open(t, redisstore.WithScriptClock(clock))
	sp := shareSpec(t, 1000, 100, time.Second, 10_000)
	for i := range 50 {
		if _, err := s.Take(ctx, []store.Item{{Key: "k", Spec: sp, Cost: 1, Tenant: fmt.Sprint("t", i), Weight: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	h, z := redisstore.ShareKeysForTest(s.Key(store.TokenBucket, "k"))
	c := s.Client()
	count := func() (int64, int64, string) {
		n, _ := c.Do(ctx, c.B().Hlen().Key(h).Build()).AsInt64()
		m, _ := c.Do(ctx, c.B().Zcard().Key(z).Build()).AsInt64()
		sum, _ := c.Do(ctx, c.B().Hget().Key(h).Field("s").Build()).ToString()
		return n, m, sum
	}
	if n, m, sum := count(); n != 51 || m != 50 || sum != fmt.Sprintf("%016x", 100) {
		t.Fatalf("50 holders of weight 2: hash %d fields, zset %d, sum %q", n, m, sum)
	}
	clock.Advance(time.Second) // last_seen <= now - active_window: expired
	if _, err := s.Take(ctx, []store.Item{{Key: "k", Spec: sp, Cost: 1, Tenant: "new", Weight: 3}}); err != nil {
		t.Fatal(err)
	}
	if n, m, sum := count(); n != 2 || m != 1 || sum != fmt.Sprintf("%016x", 3) {
		t.Fatalf("after the active window: hash %d fields, zset %d, sum %q; want the new holder alone", n, m, sum)
	}
	// Redis's clock: the keys expire.
	r := open(t)
	long := shareSpec(t, 10, 1, 3*time.Second, 10)
	for _, c := range []struct {
		sp   *store.Spec
		cost int64
		min  time.Duration
	}{{sp, 1, time.Second}, {long, 10, 10 * time.Second}} { // the active window; the bucket's 10 s to refill
		if _, err := r.Take(ctx, []store.Item{{Key: fmt.Sprint("ttl", c.cost), Spec: c.sp, Cost: c.cost, Tenant: "a"}}); err != nil {
			t.Fatal(err)
		}
		h, z := redisstore.ShareKeysForTest(r.Key(store.TokenBucket, fmt.Sprint("ttl", c.cost)))
		for _, k := range []string{h, z} {
			ms, err := r.Client().Do(ctx, r.Client().B().Pttl().Key(k).Build()).AsInt64()
			if err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond < c.min-100*time.Millisecond || time.Duration(ms)*time.Millisecond > c.min+100*time.Millisecond {
				t.Errorf("%s: PTTL %d ms (%v), want about %v", k, ms, err, c.min)
			}
		}
	}
}
