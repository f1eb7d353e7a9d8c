package redisstore_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
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

var srv *redistest.Server

func TestMain(m *testing.M) {
	var err error
	srv, err = redistest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Stop()
	if cluster != nil {
		cluster.Stop()
	}
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

func windowLimit(n int64, w time.Duration) window.Limit { return window.Limit{Limit: n, Window: w} }

// open returns a store on the test's redis-server with a prefix of its
// own, so tests do not see each other's keys.
func open(t testing.TB, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open("redis://"+srv.Addr, append([]redisstore.Option{redisstore.WithPrefix(prefix()), redisstore.WithTimeout(5 * time.Second)}, opts...)...)
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
// and windows with 128-bit products, gives identical decisions, item by
// item.
func TestIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	ms := memstore.New(memstore.WithClock(clock))
	var specs []*store.Spec
	for _, l := range []bucket.Limit{
		{Capacity: 1_000_000_000, Rate: 1e9},   // 1 GB/s in bytes
		{Capacity: 1 << 40, Rate: 999_999_937}, // odd rate, huge capacity
		{Capacity: 7, Rate: 0.7},
		{Capacity: 100, Rate: 1.0 / 7},
		{Capacity: 10, Rate: 3},
		{Capacity: 1, Rate: 1e-3},
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
	rng := rand.New(rand.NewPCG(7, 7))
	ctx := context.Background()
	steps := []time.Duration{0, 1, 999, time.Microsecond, time.Millisecond, 37 * time.Millisecond, time.Second, 70 * time.Second, time.Hour}
	refund := map[string]int64{}
	for step := range 4000 {
		clock.Advance(steps[rng.IntN(len(steps))] + time.Duration(rng.Int64N(1000)))
		var a, b []store.Item
		for j, sp := range specs {
			if rng.IntN(3) != 0 {
				continue
			}
			cost := rng.Int64N(sp.Capacity() + 1)
			if rng.IntN(2) == 0 {
				cost = rng.Int64N(min(sp.Capacity(), 50) + 1)
			}
			it := store.Item{Key: fmt.Sprint("k", j), Spec: sp, Cost: cost}
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
