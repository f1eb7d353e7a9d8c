package limiter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// heldCounter is a memstore that counts the requests its fast path
// decided (TakePlainHeldAt answering ok).
type heldCounter struct {
	*memstore.Store
	calls, held atomic.Int64
}

func (h *heldCounter) TakePlainHeldAt(items []store.Item, at *time.Time) (allowed, ok bool) {
	h.calls.Add(1)
	allowed, ok = h.Store.TakePlainHeldAt(items, at)
	if ok {
		h.held.Add(1)
	}
	return allowed, ok
}

// keyLog records what a KeyObserver is told.
type keyLog struct{ calls []string }

func (k *keyLog) ObserveKey(limit, key string, admitted int64, refused, shadow bool) {
	k.calls = append(k.calls, fmt.Sprintf("%s %q %d %v %v", limit, key, admitted, refused, shadow))
}

const fastPolicy3 = `
limits:
  - name: tenant
    key: "t:{tenant}:r:{route}"
    when: {route: "/x"}
    capacity: 10
    refill: "30/m"
  - name: global
    key: "global"
    capacity: 25
    refill_per_second: 20
  - name: user
    key: "user:{user}"
    capacity: 6
    refill_per_second: 1.5
costs:
  - when: {route: "/y"}
    cost: 3
redact: [user]
`

const fastPolicy1 = `
limits:
  - name: tenant
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 5
`

// diffSide is one limiter of the differential test with what it reports.
type diffSide struct {
	l    *Limiter
	reg  *prometheus.Registry
	logs bytes.Buffer
	keys keyLog
	res  Result
}

func newDiffSide(t *testing.T, p *policy.Policy, st store.Store) *diffSide {
	t.Helper()
	d := &diffSide{reg: prometheus.NewRegistry()}
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	lg := slog.New(slog.NewJSONHandler(&d.logs, &slog.HandlerOptions{ReplaceAttr: noTime}))
	l, err := New(p, st, WithRegisterer(d.reg), WithLogger(lg), WithKeyObserver(&d.keys))
	if err != nil {
		t.Fatal(err)
	}
	d.l = l
	return d
}

// metrics is the registry's text, the latency histogram left out (it
// samples checks at random), and the store's own key and eviction counts
// (when an idle key is evicted depends on the shard its key hashes to,
// by a seed of each store's: an evicted idle key decides as a new one).
func (d *diffSide) metrics(t *testing.T) string {
	t.Helper()
	mfs, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_check_duration_seconds", "sluice_keys", "sluice_evictions_total":
			continue
		}
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestFastPathDifferential runs the same random requests through a
// limiter on the fast path and one on the general path (no fast plan),
// over stores on one manual clock, and requires identical results
// (statuses, refusals, errors), metrics, key observations and refusal
// logs; and that the fast path decided most of them.
func TestFastPathDifferential(t *testing.T) {
	for _, src := range []string{fastPolicy1, fastPolicy3} {
		t.Run(fmt.Sprintf("limits=%d", strings.Count(src, "- name:")), func(t *testing.T) {
			p, err := policy.Parse([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
			hc := &heldCounter{Store: memstore.New(memstore.WithClock(clock))}
			fast := newDiffSide(t, p, hc)
			slow := newDiffSide(t, p, memstore.New(memstore.WithClock(clock)))
			slow.l.ht = nil
			if err := slow.l.SetPolicy(p); err != nil {
				t.Fatal(err)
			}
			if fast.l.compiled.Load().fast == nil || slow.l.compiled.Load().fast != nil {
				t.Fatal("fast plan: want one on the fast side only")
			}
			rng := rand.New(rand.NewPCG(1, 2))
			tenants := []string{"a", "b", "c:d", "50%", "{x}", ""}
			users := []string{"u1", "u2", "u3"}
			routes := []string{"/x", "/y", "/z", ""}
			const n = 4000
			eligible := 0
			for i := range n {
				desc := map[string]string{}
				if v := tenants[rng.IntN(len(tenants))]; v != "" {
					desc["tenant"] = v
				}
				if rng.IntN(4) > 0 {
					desc["user"] = users[rng.IntN(len(users))]
				}
				if v := routes[rng.IntN(len(routes))]; v != "" {
					desc["route"] = v
				}
				req := Request{Descriptors: desc, Cost: []int64{0, 0, 1, 2, 5, 11}[rng.IntN(6)], Retry: rng.IntN(5) == 0}
				switch rng.IntN(20) { // now and then a request the fast path leaves to the general one
				case 0:
					req.Peek = true
				case 1:
					req.Cost = -1
				case 2:
					req.Receipt = true
				case 3:
					req.RefuseUnmatched = true
				}
				if fastRequest(&req) {
					eligible++
				}
				clock.Advance(time.Duration(rng.IntN(150)) * time.Millisecond)
				var ef, es error
				if rng.IntN(2) == 0 {
					ef, es = fast.l.CheckInto(context.Background(), req, &fast.res), slow.l.CheckInto(context.Background(), req, &slow.res)
				} else {
					fast.res, ef = fast.l.Check(context.Background(), req)
					slow.res, es = slow.l.Check(context.Background(), req)
				}
				if fmt.Sprint(ef) != fmt.Sprint(es) || errors.Is(ef, sluice.ErrCostExceedsCapacity) != errors.Is(es, sluice.ErrCostExceedsCapacity) {
					t.Fatalf("request %d %+v: errors %v and %v", i, req, ef, es)
				}
				a, b := fast.res, slow.res
				a.scratch, b.scratch = nil, nil
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("request %d %+v:\nfast    %+v\ngeneral %+v", i, req, a, b)
				}
			}
			if got, want := fast.metrics(t), slow.metrics(t); got != want {
				t.Fatalf("metrics differ:\nfast:\n%s\ngeneral:\n%s", got, want)
			}
			if !reflect.DeepEqual(fast.keys.calls, slow.keys.calls) {
				t.Fatalf("key observations differ (%d and %d)", len(fast.keys.calls), len(slow.keys.calls))
			}
			// The first ratelog.Burst records are written by both (the
			// budget's later records depend on the wall clock).
			fl, sl := strings.SplitN(fast.logs.String(), "\n", 21), strings.SplitN(slow.logs.String(), "\n", 21)
			if len(fl) < 21 || !reflect.DeepEqual(fl[:20], sl[:20]) {
				t.Fatalf("refusal logs differ:\n%s\n%s", strings.Join(fl[:min(len(fl), 20)], "\n"), strings.Join(sl[:min(len(sl), 20)], "\n"))
			}
			if !strings.Contains(fast.metrics(t), `result="rejected"`) {
				t.Fatal("no refusal: the test does not reach refusals")
			}
			// Most eligible requests were decided on the fast path (the
			// rest: a new key, a cost above a capacity, no limit applying).
			if held := int(hc.held.Load()); held < eligible/2 {
				t.Fatalf("fast path decided %d of %d eligible requests (%d tried)", held, eligible, hc.calls.Load())
			}
			t.Logf("%d requests, %d eligible, %d decided on the fast path", n, eligible, hc.held.Load())
		})
	}
}

// TestFastPlanEligibility: a policy gets a fast plan only when every
// limit is a plain enforced token bucket on a store with a fast path, and
// a check under an applied override Set never takes it.
func TestFastPlanEligibility(t *testing.T) {
	plain := "limits:\n  - {name: a, key: \"a:{a}\", capacity: 5, refill: 5/m}\n"
	for src, want := range map[string]bool{
		plain: true,
		"limits:\n  - {name: a, key: \"a:{a}\", capacity: 5, refill: 5/m, shadow: true}\n":                  false,
		"limits:\n  - {name: a, key: \"a:{a}\", capacity: 5, refill: 5/m, block_for: 10m}\n":                false,
		"limits:\n  - {name: a, key: \"a:{a}\", hash_tag: \"{a}\", capacity: 5, refill: 5/m}\n":             false,
		"limits:\n  - {name: a, key: \"a:{a}\", algorithm: sliding_window, limit: 5, window: 1m}\n":         false,
		"limits:\n  - {name: a, key: \"a:{a}\", max_in_flight: 5, lease_ttl: 30s}\n":                        false,
		plain + "  - {name: b, key: \"b:{b}\", algorithm: fixed_window, limit: 5, window: 1m}\n":            false,
		plain + "  - {name: b, key: \"b:{b}\", capacity: 5, refill_per_second: 1, when: {route: \"/x\"}}\n": true,
		plain + "costs:\n  - {when: {a: x}, cost: 2}\n":                                                     true,
		plain + "  - {name: b, key: \"b:{b}:{c}-lit\", capacity: 5, refill: 1/h}\n":                         true,
	} {
		p, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		l, err := New(p, memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		if got := l.compiled.Load().fast != nil; got != want {
			t.Errorf("%s: fast plan %v, want %v", src, got, want)
		}
	}
	p, _ := policy.Parse([]byte(plain))
	if l, _ := New(p, memstore.New(), WithShadow()); l.compiled.Load().fast != nil {
		t.Error("WithShadow: a fast plan")
	}
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 5, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !fastSpec(sp) {
		t.Error("a plain bucket spec is not fastSpec")
	}
	fs := *sp
	fs.FairShare = &store.FairShare{MaxTenants: 10}
	bf := *sp
	bf.BlockFor = time.Minute
	if fastSpec(&fs) || fastSpec(&bf) {
		t.Error("a fair-share or blocking spec is fastSpec")
	}
	// An override Set applied: the general path, whatever the request.
	hc := &heldCounter{Store: memstore.New()}
	l, _ := New(p, hc)
	l.SetOverrides(overrides.NewSet(p))
	for range 3 {
		if _, err := l.Check(context.Background(), Request{Descriptors: map[string]string{"a": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := hc.calls.Load(); n != 0 {
		t.Errorf("under an override Set the fast path was tried %d times", n)
	}
}

// TestFastStatusFields: writeStatus writes every field of a LimitStatus
// (a field added to it must be written there too): a status full of
// garbage comes out as the general path's.
func TestFastStatusFields(t *testing.T) {
	if n := reflect.TypeOf(LimitStatus{}).NumField(); n != 21 {
		t.Fatalf("LimitStatus has %d fields: update fastLimit.writeStatus (and this count)", n)
	}
	p, _ := policy.Parse([]byte(fastPolicy1))
	l, _ := New(p, memstore.New())
	c := l.compiled.Load()
	st := LimitStatus{Name: "x", Key: "y", Algorithm: "z", Capacity: 9, RefillPerSecond: 9, AdaptiveRefill: 9, TokensRemaining: 9,
		TokenCost: 9, Allowed: true, Shadow: true, ShadowRefused: true, Denied: true, NearLimit: true, Priority: "p",
		RetryAfter: 9, BlockFor: 9, ResetAfter: 9, Period: "day", Window: 9, Override: &overrides.Rule{},
		FairShare: ShareStatus{Tenant: "t", Weight: 9, Refused: true}}
	c.fast.limits[0].writeStatus(&st, "k", 3, &sluice.Decision{Allowed: true, Remaining: 4, ResetAfter: 5})
	want := c.status[0]
	want.Key, want.TokenCost, want.Allowed, want.TokensRemaining, want.ResetAfter = "k", 3, true, 4, 5
	if st != want {
		t.Fatalf("writeStatus: %+v, want %+v", st, want)
	}
}

// TestFastPathConcurrent: checks from 8 goroutines on the fast path admit
// exactly a bucket's capacity (no refill on a still clock), all or
// nothing over three limits: the global bucket's 100, whatever the users'.
func TestFastPathConcurrent(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - {name: global, key: global, capacity: 100, refill: 1/h}
  - {name: user, key: "user:{user}", capacity: 40, refill: 1/h}
  - {name: tenant, key: "tenant:{tenant}", capacity: 1000, refill: 1/h}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	hc := &heldCounter{Store: memstore.New(memstore.WithClock(clock))}
	l, err := New(p, hc)
	if err != nil {
		t.Fatal(err)
	}
	users := []string{"a", "b", "c", "d"}
	for _, u := range users { // the keys exist: later checks take the fast path
		if _, err := l.Check(context.Background(), Request{Descriptors: map[string]string{"user": u, "tenant": "t"}}); err != nil {
			t.Fatal(err)
		}
	}
	admitted := make(chan int, 8)
	for g := range 8 {
		go func() {
			n := 0
			var res Result
			for i := range 200 {
				req := Request{Descriptors: map[string]string{"user": users[(g+i)%4], "tenant": "t"}}
				if err := l.CheckInto(context.Background(), req, &res); err != nil {
					t.Error(err)
				}
				if res.Allowed {
					n++
				}
			}
			admitted <- n
		}()
	}
	total := 4 // the four that made the keys
	for range 8 {
		total += <-admitted
	}
	// global admits 100; each user 40 (4 users: 160), so global decides.
	if total != 100 {
		t.Fatalf("admitted %d, want exactly 100", total)
	}
	if hc.held.Load() < 8*200/2 {
		t.Fatalf("fast path decided %d of %d checks", hc.held.Load(), 8*200)
	}
}

// TestFastResultFields: a check on the fast path through CheckInto leaves
// no field of an earlier Result behind (checkFast writes each one).
func TestFastResultFields(t *testing.T) {
	if n := reflect.TypeOf(Result{}).NumField(); n != 10 {
		t.Fatalf("Result has %d fields: update checkFast's writes of *res (and this count)", n)
	}
	p, _ := policy.Parse([]byte(fastPolicy1))
	l, _ := New(p, memstore.New())
	ctx, req := context.Background(), Request{Descriptors: map[string]string{"tenant": "a"}}
	if _, err := l.Check(ctx, req); err != nil { // (the key held: the next ones are on the fast path)
		t.Fatal(err)
	}
	var res Result
	for range 2 {
		res.Allowed, res.RetryAfter, res.Slots, res.Cost, res.Wait = false, 9, store.Slots{ID: "x", Keys: []string{"y"}}, 9, 9
		res.Receipt, res.Priority, res.class = Receipt{limits: []string{"z"}, settled: new(atomic.Bool)}, "p", 9
		res.Limits = append(res.Limits[:0], LimitStatus{Name: "old"}, LimitStatus{Name: "old"})
		if err := l.CheckInto(ctx, req, &res); err != nil {
			t.Fatal(err)
		}
		sc := res.scratch
		res.scratch = nil
		want := Result{Allowed: true, Limits: []LimitStatus{l.compiled.Load().status[0]}, Cost: 1}
		want.Limits[0].Key, want.Limits[0].TokenCost, want.Limits[0].Allowed = "tenant:a", 1, true
		want.Limits[0].TokensRemaining, want.Limits[0].ResetAfter = res.Limits[0].TokensRemaining, res.Limits[0].ResetAfter
		if !reflect.DeepEqual(res, want) {
			t.Fatalf("CheckInto: %+v, want %+v", res, want)
		}
		res.scratch = sc
	}
}

// TestFastSpecsHeld: every spec a fast plan holds is one memstore's
// TakeHeldAt decides (the shape TakePlainHeldAt takes on trust).
func TestFastSpecsHeld(t *testing.T) {
	for _, src := range []string{fastPolicy1, `
limits:
  - {name: global, key: global, capacity: 100, refill: 1/h}
  - {name: user, key: "user:{user}", capacity: 40, refill: 1/h, on_store_error: fail_closed}
`} {
		p, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := New(p, memstore.New())
		f := l.compiled.Load().fast
		if f == nil {
			t.Fatalf("no fast plan for %s", src)
		}
		for _, fl := range f.limits {
			if !memstore.HeldSpec(fl.spec) {
				t.Fatalf("limit %s: spec %+v is not held", fl.name, fl.spec)
			}
		}
	}
}
