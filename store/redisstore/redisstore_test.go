package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

// srv is the redis-server of the tests (a test's own when it needs
// settings of its own), started by the first test that asks for it.
var srv redistest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	srv.Stop()
	cluster.Stop()
	os.Exit(code)
}

var prefixSeq atomic.Int64

// prefix returns a key prefix no other test uses.
func prefix() string { return fmt.Sprintf("t%d-%d:", time.Now().UnixNano(), prefixSeq.Add(1)) }

func mustSpec(t *testing.T, capacity int64, rate float64) *store.Spec {
	t.Helper()
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: capacity, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// limbRate is a rate that is no simple fraction (the float just below
// 99.9): its spec takes the script's limb path.
var limbRate = math.Nextafter(99.9, 0)

// pathSpecs returns a spec on the script's double path and one on its limb
// path, checking that they are.
func pathSpecs(t *testing.T) (double, limb *store.Spec) {
	t.Helper()
	double, limb = mustSpec(t, 10, 100), mustSpec(t, 10, limbRate)
	if !redisstore.FitsDoublePath(double) || redisstore.FitsDoublePath(limb) {
		t.Fatalf("FitsDoublePath: %v for 100/s, %v for %v/s", redisstore.FitsDoublePath(double), redisstore.FitsDoublePath(limb), limbRate)
	}
	return double, limb
}

func windowLimit(n int64, w time.Duration) window.Limit { return window.Limit{Limit: n, Window: w} }

// open returns a store on the test's redis-server with a prefix of its
// own, so tests do not see each other's keys.
func open(t testing.TB, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open("redis://"+srv.Addr(t), append([]redisstore.Option{redisstore.WithPrefix(prefix()), redisstore.WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store {
		return open(t, redisstore.WithScriptClock(c))
	})
}

// The script's limb arithmetic against math/big on random operands of
// every size up to 128 bits.
func TestArithmetic(t *testing.T) {
	s := open(t)
	lib, _ := os.ReadFile("lib.lua")
	script := rueidis.NewLuaScript(string(lib) + `
local function parse(str) local a = {} for x in string.gmatch(str, '[^,]+') do a[#a+1] = tonumber(x) end return norm(a) end
local function show(a) local t = {} for i = 1, #a do t[i] = string.format('%d', a[i]) end return table.concat(t, ',') end
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = parse(ARGV[i]), parse(ARGV[i+1])
  local q, r = divmod(a, b)
  local d = '-'
  if cmp(a, b) >= 0 then d = show(sub(a, b)) end
  out[#out+1] = show(mul(a, b)) .. ' ' .. show(add(a, b)) .. ' ' .. d .. ' ' .. show(q) .. ' ' .. show(r) .. ' ' .. cmp(a, b)
end
return out`)
	limbs := func(x *big.Int) string {
		var parts []string
		y := new(big.Int).Set(x)
		m := big.NewInt(1 << 24)
		for y.Sign() > 0 {
			r := new(big.Int)
			y.DivMod(y, m, r)
			parts = append(parts, r.String())
		}
		return strings.Join(parts, ",")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func() *big.Int {
		bitsN := rng.IntN(129)
		x := new(big.Int)
		for range bitsN {
			x.Lsh(x, 1)
			if rng.IntN(2) == 1 {
				x.SetBit(x, 0, 1)
			}
		}
		if bitsN >= 2 && rng.IntN(8) == 0 { // runs of ones and zeros stress carries
			x.Sub(new(big.Int).Lsh(big.NewInt(1), uint(bitsN)), big.NewInt(int64(rng.IntN(3))))
		}
		return x
	}
	for round := range 40 {
		var args []string
		var pairs [][2]*big.Int
		for range 100 {
			a, b := random(), random()
			if rng.IntN(3) == 0 && a.Cmp(b) < 0 { // quotients of many limbs
				a, b = b, a
			}
			if b.Sign() == 0 {
				b.SetInt64(int64(rng.IntN(1000) + 1))
			}
			pairs = append(pairs, [2]*big.Int{a, b})
			args = append(args, limbs(a), limbs(b))
		}
		got, err := script.Exec(context.Background(), s.Client(), nil, args).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pairs {
			a, b := p[0], p[1]
			q, r := new(big.Int).DivMod(a, b, new(big.Int))
			d := "-"
			if a.Cmp(b) >= 0 {
				d = limbs(new(big.Int).Sub(a, b))
			}
			want := fmt.Sprintf("%s %s %s %s %s %d", limbs(new(big.Int).Mul(a, b)), limbs(new(big.Int).Add(a, b)), d, limbs(q), limbs(r), a.Cmp(b))
			if got[i] != want {
				t.Fatalf("round %d: a=%v b=%v\n got %s\nwant %s", round, a, b, got[i], want)
			}
		}
	}
}

// The same random trace through memstore and redisstore, at high and odd
// rates (where nanosecond timestamps times the rate need 128 bits), with
// settlements that push buckets deep into debt (so states are rebased),
// windows with 128-bit products, and fair shares on such buckets, gives
// identical decisions, item by item.
func TestIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	ms := memstore.New(memstore.WithClock(clock))
	var specs []*store.Spec
	for _, l := range []bucket.Limit{
		{Capacity: 1_000_000_000, Rate: 1e9},              // 1 GB/s in bytes
		{Capacity: 1 << 40, Rate: 999_999_937},            // odd rate, huge capacity (binary units)
		{Capacity: 7, Rate: math.Nextafter(0.7, 1)},       // no simple fraction (binary units)
		{Capacity: 100, Rate: math.Nextafter(1.0/7, 0)},   // likewise
		{Capacity: 1 << 30, Rate: math.Nextafter(1e9, 0)}, // likewise, fast
		{Capacity: 7, Rate: 0.7},                          // 7 per 10 s (whole units)
		{Capacity: 100, Rate: 1.0 / 7},
		{Capacity: 10, Rate: 3},
		{Capacity: 1, Rate: 1e-3},
		{Capacity: 1_000_000, Rate: 1e6},
		{Capacity: 1000, Rate: 100},
		{Capacity: 5000, Rate: 250_000},
		{Capacity: 3, Rate: 5},
		bucket.PerMinute(100), // Envoy's units and the policy's refill "N/m", "N/h", "N/d"
		bucket.PerMinute(99_999),
		bucket.PerHour(1000),
		{Capacity: 100_000, Rate: 100_000.0 / 86400},
		{Capacity: 1 << 20, Rate: 1 << 20},
		{Capacity: 999_999_937, Rate: 999_999_937},
		bucket.Every(3 * time.Millisecond).WithCapacity(50),
		// Envoy units with large odd requests_per_unit: a clock tick of
		// CompileSmall (den > 1) keeps them on the double path.
		{Capacity: 999_999_937, Rate: 999_999_937.0 / 86400},
		{Capacity: 123_456_789, Rate: 123_456_789.0 / 3600},
		{Capacity: 16_777_213, Rate: 16_777_213.0 / 60},
	} {
		sp, err := store.NewBucketSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, sp)
	}
	for _, w := range []window.Limit{{Limit: 1 << 40, Window: 24 * time.Hour}, {Limit: 10, Window: 1500 * time.Millisecond}} {
		specs = append(specs, &store.Spec{Kind: store.SlidingWindow, Window: w})
	}
	specs = append(specs, &store.Spec{Kind: store.FixedWindow, Window: window.Limit{Limit: 5, Window: time.Second}})
	// The penalty box on each path and kind, with blocks shorter and
	// longer than the time to refill.
	for _, b := range []struct {
		sp *store.Spec
		d  time.Duration
	}{{specs[7], 3 * time.Second}, {specs[2], time.Hour}, {specs[12], 999_999_937}, {specs[len(specs)-3], 40 * time.Second}, {specs[len(specs)-1], 2 * time.Second}, {specs[10], 1}} {
		c := *b.sp
		c.BlockFor = b.d
		specs = append(specs, &c)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	ctx := context.Background()
	steps := []time.Duration{0, 1, 999, time.Microsecond, time.Millisecond, 37 * time.Millisecond, time.Second, 70 * time.Second, time.Hour}
	refund := map[string]int64{}
	defer func() {
		st := rs.ScriptStats()
		t.Logf("script: %d items, %d on the double path", st.Items, st.Fast)
		if st.Fast < st.Items/10 || st.Fast == st.Items {
			t.Errorf("both script paths must be exercised: %+v", st)
		}
	}()
	classes := rand.New(rand.NewPCG(8, 8)) // priority classes' reserves (a stream of their own)
	reserves := []uint32{0, 0, 0, 200_000, 500_000, 1, 999_999, 333_333}
	// Fair-share twins of buckets at extreme rates and capacities (their
	// shares' products need more than 64 bits), drawn from a stream of
	// their own, so the trace above is the same.
	fair := rand.New(rand.NewPCG(9, 9))
	var shares []*store.Spec
	for _, j := range []int{0, 1, 2, 4, 8, 13, 19, 20} {
		sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: specs[j].Bucket.Limit(), FairShare: store.FairShare{ActiveWindow: 2 * time.Second, MaxTenants: 3}})
		if err != nil {
			t.Fatal(err)
		}
		shares = append(shares, sp)
	}
	weights := []uint32{0, 1, 2, 3, 4_000_000_000}
	for step := range 4000 {
		clock.Advance(steps[rng.IntN(len(steps))] + time.Duration(rng.Int64N(1000)))
		var a, b []store.Item
		reserve := reserves[classes.IntN(len(reserves))]
		for j, sp := range specs {
			if rng.IntN(3) != 0 {
				continue
			}
			cost := rng.Int64N(sp.Capacity() + 1)
			if rng.IntN(2) == 0 {
				cost = rng.Int64N(min(sp.Capacity(), 50) + 1)
			}
			it := withinClass(store.Item{Key: fmt.Sprint("k", j), Spec: sp, Cost: cost, Reserve: reserve})
			a, b = append(a, it), append(b, it)
		}
		if len(a) == 0 {
			continue
		}
		if rng.IntN(10) == 0 { // settle: returns, charges into debt (up to the largest state)
			it := a[rng.IntN(len(a))]
			delta := []int64{-it.Cost, rng.Int64N(1000) + 1, 1 << 50, it.Spec.Capacity() * 1000}[rng.IntN(4)]
			adj := []store.Adjustment{{Key: it.Key, Spec: it.Spec, Delta: delta, RefundBefore: refund[it.Key]}}
			if err := ms.Adjust(ctx, adj); err != nil {
				t.Fatal(err)
			}
			if err := rs.Adjust(ctx, adj); err != nil {
				t.Fatal(err)
			}
		}
		for j, sp := range shares {
			if fair.IntN(3) != 0 {
				continue
			}
			cost := fair.Int64N(sp.Capacity() + 1)
			if fair.IntN(2) == 0 {
				cost = fair.Int64N(min(sp.Capacity(), 50) + 1)
			}
			it := withinClass(store.Item{Key: fmt.Sprint("fs", j), Spec: sp, Cost: cost, Reserve: reserve,
				Tenant: []string{"", "a", "b", "c", "d"}[fair.IntN(5)], Weight: weights[fair.IntN(len(weights))]})
			a, b = append(a, it), append(b, it)
		}
		ra, err := ms.Take(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := rs.Take(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if ra.Allowed != rb.Allowed {
			t.Fatalf("step %d: memstore allowed %v, redis %v", step, ra.Allowed, rb.Allowed)
		}
		for i := range a {
			if a[i].RefundBefore != 0 {
				refund[a[i].Key] = a[i].RefundBefore
			}
			if a[i].Decision != b[i].Decision || a[i].RefundBefore-storetest.Epoch.UnixNano() != b[i].RefundBefore-storetest.Epoch.UnixNano() {
				t.Fatalf("step %d item %s cost %d: memstore %+v (%d), redis %+v (%d)", step, a[i].Key, a[i].Cost,
					a[i].Decision, a[i].RefundBefore, b[i].Decision, b[i].RefundBefore)
			}
		}
	}
}

// A state that the limb model rebased (its debt outlived MaxElapsed) comes
// back to the double path with a phase; decisions stay identical.
func TestRebasedStateOnTheDoublePath(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	ms := memstore.New(memstore.WithClock(clock))
	sp := mustSpec(t, 1000, 100) // MaxElapsed about a month; den = 5^7
	ctx := context.Background()
	maxDays := time.Duration(sp.Bucket.MaxElapsed())
	debt := int64((maxDays + 2*time.Second).Seconds() * 100)
	for _, s := range []store.Store{ms, rs} {
		if _, err := s.Take(ctx, []store.Item{{Key: "k", Spec: sp, Cost: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Adjust(ctx, []store.Adjustment{{Key: "k", Spec: sp, Delta: debt}}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(maxDays + time.Second) // 100 tokens of debt left: 900 to take
	before := rs.ScriptStats()
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 3000 {
		clock.Advance(time.Duration(rng.Int64N(int64(40 * time.Millisecond))))
		a := []store.Item{{Key: "k", Spec: sp, Cost: rng.Int64N(8)}}
		b := []store.Item{a[0]}
		ms.Take(ctx, a)
		if _, err := rs.Take(ctx, b); err != nil {
			t.Fatal(err)
		}
		if a[0].Decision != b[0].Decision {
			t.Fatalf("step %d: memstore %+v, redis %+v", step, a[0].Decision, b[0].Decision)
		}
	}
	if st := rs.ScriptStats(); st.Fast-before.Fast < 2900 {
		t.Fatalf("the rebased state did not take the double path: %+v -> %+v", before, st)
	}
}

// Redis TIME can step back (a failover, an NTP step). A reading earlier
// than a key's last write counts as the time of that write: the bucket
// never holds more than it did then, and waits are measured from the
// stale reading. (The in-process store reads a monotonic clock.)
func TestStaleTimeCountsAsTheLastWrite(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	ctx := context.Background()
	double, limb := pathSpecs(t)
	for _, sp := range []*store.Spec{double, limb} {
		key := fmt.Sprint(sp.Bucket.Limit())
		take := func(cost int64) sluice.Decision {
			items := []store.Item{{Key: key, Spec: sp, Cost: cost}}
			if _, err := rs.Take(ctx, items); err != nil {
				t.Fatal(err)
			}
			return items[0].Decision
		}
		take(10)
		clock.Advance(50 * time.Millisecond) // 5 tokens back
		take(1)                              // a write at t1
		at1 := take(0)
		clock.Advance(-20 * time.Millisecond) // 2 tokens fewer, were it not clamped
		stale := take(0)
		if stale.Remaining != at1.Remaining || stale.Allowed != at1.Allowed {
			t.Fatalf("%v: stale reading %+v, at the last write %+v", sp.Bucket.Limit(), stale, at1)
		}
		if stale.ResetAfter != at1.ResetAfter+20*time.Millisecond {
			t.Fatalf("%v: stale reset %v, want %v + 20ms", sp.Bucket.Limit(), stale.ResetAfter, at1.ResetAfter)
		}
		clock.Advance(20 * time.Millisecond)
	}
}

// A state not written for long (deep in debt) gives products e*rn beyond
// 2^53: the double path splits them; decisions stay identical.
func TestLongElapsedOnTheDoublePath(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	ms := memstore.New(memstore.WithClock(clock))
	sp := mustSpec(t, 3, 5) // den = 781250, rn = 370966: e*rn passes 2^53 after 24 s
	ctx := context.Background()
	before := rs.ScriptStats()
	for _, s := range []store.Store{ms, rs} {
		if _, err := s.Take(ctx, []store.Item{{Key: "k", Spec: sp, Cost: 3}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Adjust(ctx, []store.Adjustment{{Key: "k", Spec: sp, Delta: 400}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []time.Duration{60 * time.Second, 17*time.Second + 123456789, 3 * time.Second, time.Second} {
		clock.Advance(step)
		for cost := range int64(4) {
			a := []store.Item{{Key: "k", Spec: sp, Cost: cost}}
			b := []store.Item{a[0]}
			ms.Take(ctx, a)
			if _, err := rs.Take(ctx, b); err != nil {
				t.Fatal(err)
			}
			if a[0].Decision != b[0].Decision {
				t.Fatalf("after %v cost %d: memstore %+v, redis %+v", step, cost, a[0].Decision, b[0].Decision)
			}
		}
	}
	if st := rs.ScriptStats(); st.Fast-before.Fast < 14 {
		t.Fatalf("not on the double path: %+v -> %+v", before, st)
	}
}

// With Redis' own clock, a key expires when its state equals a new key's
// again (a double-path bucket up to a second later, so that most writes
// keep the TTL): no garbage is left, and no key expires early.
func TestKeysExpireWhenNewAgain(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	double, limb := pathSpecs(t)
	pttl := func(key string) int64 {
		v, err := s.Client().Do(ctx, s.Client().B().Pttl().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name  string
		sp    *store.Spec
		slack int64 // ms the key may outlive its state
	}{
		{"double-path bucket", double, 1000},
		{"limb-path bucket", limb, 0},
		{"sliding window", &store.Spec{Kind: store.SlidingWindow, Window: windowLimit(10, 200*time.Millisecond)}, 0},
	} {
		key := tc.name
		for i := range 5 {
			items := []store.Item{{Key: key, Spec: tc.sp, Cost: 2}}
			start := time.Now()
			if _, err := s.Take(ctx, items); err != nil {
				t.Fatal(err)
			}
			reset := items[0].Decision.ResetAfter.Milliseconds()
			got := pttl(s.Key(tc.sp.Kind, key))
			// The TTL was set with the decision and counts down from there:
			// by the PTTL call it has lost at most the time since start (on
			// a busy machine, much more than a millisecond).
			gone := time.Since(start).Milliseconds() + 1
			if got < reset-gone || got > reset+tc.slack+5 {
				t.Fatalf("%s take %d: PTTL %d ms, state new again in %d ms (slack %d, %d ms since the take began)", tc.name, i, got, reset, tc.slack, gone)
			}
		}
	}
	// In-flight leases: the set lives as long as its last lease.
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 3, SlotTTL: 300 * time.Millisecond}
	start := time.Now()
	if _, err := s.Take(ctx, []store.Item{{Key: "c", Spec: conc, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if got, gone := pttl(s.Key(store.Concurrency, "c")), time.Since(start).Milliseconds()+1; got < 300-gone || got > 302 {
		t.Fatalf("lease set PTTL %d (%d ms since the take began)", got, gone)
	}
	time.Sleep(1300 * time.Millisecond)
	n, err := s.Client().Do(ctx, s.Client().B().Keys().Pattern(s.Key(store.TokenBucket, "*")[:len(s.Key(store.TokenBucket, ""))-2]+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(n) != 0 {
		t.Fatalf("garbage left: %q", n)
	}
}

// FuzzIdenticalToMemstore drives memstore and redisstore with the same
// fuzzed sequence of takes, settles and clock steps, over limits on both
// script paths, each key's spec changing between its limit's and an
// override's (raised, lowered, another rate: Item.Base), and requires
// identical decisions.
func FuzzIdenticalToMemstore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 200, 255, 17, 3})
	f.Add([]byte{5, 5, 5, 5, 250, 250, 1, 1, 1, 1, 128, 64, 32})
	limits := []bucket.Limit{{Capacity: 10, Rate: 100}, {Capacity: 3, Rate: 5}, {Capacity: 7, Rate: 0.7},
		{Capacity: 1_000_000, Rate: 1e6}, {Capacity: 1 << 40, Rate: 999_999_937},
		{Capacity: 7, Rate: math.Nextafter(0.7, 1)}, bucket.PerMinute(100), bucket.PerHour(1000),
		{Capacity: 3, Rate: 5}, {Capacity: 7, Rate: math.Nextafter(0.7, 1)}} // the last two with a block_for
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 600 {
			ops = ops[:600]
		}
		clock := sluice.NewManualClock(storetest.Epoch)
		rs := open(t, redisstore.WithScriptClock(clock))
		ms := memstore.New(memstore.WithClock(clock))
		var specs []*store.Spec
		var variants [][4]*store.Spec // per limit: itself, raised, lowered, another rate
		for i, l := range limits {
			var vs [4]*store.Spec
			for v, vl := range []bucket.Limit{l, {Capacity: l.Capacity * 10, Rate: l.Rate * 10},
				{Capacity: max(l.Capacity/2, 1), Rate: l.Rate}, {Capacity: l.Capacity, Rate: l.Rate * 3}} {
				sl := store.Limit{Kind: store.TokenBucket, Bucket: vl}
				if i >= len(limits)-2 {
					sl.BlockFor = time.Duration(i) * 150 * time.Millisecond
				}
				sp, err := store.NewSpec(sl)
				if err != nil {
					t.Fatal(err)
				}
				vs[v] = sp
			}
			specs = append(specs, vs[0])
			variants = append(variants, vs)
		}
		ctx := context.Background()
		refund := map[string]int64{}
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i], ops[i+1], ops[i+2]
			clock.Advance(time.Duration(a) * time.Duration(1) << (b % 40))
			sp := specs[int(op)%len(specs)]
			key := fmt.Sprint("k", int(op)%len(specs))
			var base *store.Spec
			if v := (int(op) / len(specs)) % 4; v > 0 && op < 240 {
				sp, base = variants[int(op)%len(specs)][v], sp
			} else if op >= 240 && a&1 == 1 {
				sp, base = variants[int(op)%len(specs)][1+int(a>>1)%3], sp
			}
			if op >= 240 { // settle
				delta := int64(b) - 64
				if op >= 250 {
					delta = int64(b) << 20
				}
				adj := []store.Adjustment{{Key: key, Spec: sp, Base: base, Delta: delta, RefundBefore: refund[key]}}
				ms.Adjust(ctx, adj)
				if err := rs.Adjust(ctx, adj); err != nil {
					t.Fatal(err)
				}
				continue
			}
			cost := min(int64(b), sp.Capacity())
			x := []store.Item{{Key: key, Spec: sp, Base: base, Cost: cost}}
			y := []store.Item{x[0]}
			if _, err := ms.Take(ctx, x); err != nil {
				t.Fatal(err)
			}
			if _, err := rs.Take(ctx, y); err != nil {
				t.Fatal(err)
			}
			if x[0].Decision != y[0].Decision || x[0].RefundBefore != y[0].RefundBefore {
				t.Fatalf("op %d (%v cost %d): memstore %+v %d, redis %+v %d", i/3, sp.Bucket.Limit(), cost, x[0].Decision, x[0].RefundBefore, y[0].Decision, y[0].RefundBefore)
			}
			if x[0].RefundBefore != 0 {
				refund[key] = x[0].RefundBefore
			}
		}
	})
}

// Every Envoy unit with any requests_per_unit up to 1e9, and every rate
// up to 1e9/s written as N per second, takes the script's double path.
func TestCommonLimitsTakeTheDoublePath(t *testing.T) {
	for _, u := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		for _, n := range []int64{1, 7, 100, 1000, 99_999, 1_000_003, 123_456_789, 999_999_937, 1_000_000_000} {
			sp := mustSpec(t, n, float64(n)/u.Seconds())
			if !redisstore.FitsDoublePath(sp) {
				num, den, _ := sp.Bucket.Ratio()
				t.Errorf("%d per %v: limb path (capacity %d units, %d/%d units per ns)", n, u, sp.Bucket.CapacityUnits(), num, den)
			}
		}
	}
	// ... and each decides there: a take on one of them is counted fast.
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	sp := mustSpec(t, 999_999_937, 999_999_937.0/86400)
	before := rs.ScriptStats()
	for range 3 {
		clock.Advance(time.Second)
		if _, err := rs.Take(context.Background(), []store.Item{{Key: "k", Spec: sp, Cost: 1000}}); err != nil {
			t.Fatal(err)
		}
	}
	if st := rs.ScriptStats(); st.Fast-before.Fast != 3 {
		t.Fatalf("999,999,937 per day: %d of 3 decisions on the double path", st.Fast-before.Fast)
	}
}

// Renew on Redis' own clock (no script clock): a renewed slot outlives its
// TTL, and its key's expiry follows it.
func TestRenewOnRedisTime(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	sp := &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: 300 * time.Millisecond}
	items := []store.Item{{Key: "renew", Spec: sp, Cost: 1}}
	r, err := s.Take(ctx, items)
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if err := s.Renew(ctx, r.Slots, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // twice the TTL: only the renewal holds the slot
	if r2, err := s.Take(ctx, items); err != nil || r2.Allowed {
		t.Fatalf("rule: a renewed slot is held past its TTL: %+v %v", r2, err)
	}
	pttl, err := redistest.Do(srv.Addr(t), "PTTL", r.Slots.Keys[0])
	if n, _ := strconv.Atoi(strings.TrimPrefix(pttl, ":")); err != nil || n < 3000 {
		t.Fatalf("the lease set's key expires with its renewed slot: PTTL %q %v", pttl, err)
	}
	s.Release(ctx, r.Slots)
	if r3, err := s.Take(ctx, items); err != nil || !r3.Allowed {
		t.Fatalf("released: %+v %v", r3, err)
	}
}
