package limiter_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

const overSrc = `
limits:
  - name: api
    key: "t:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: global
    key: "all"
    capacity: 1000
    refill_per_second: 1000
`

// overLimiter is a limiter of overSrc over st applying the overrides os.
func overLimiter(t *testing.T, st store.Store, os []overrides.Override, opts ...limiter.Option) (*limiter.Limiter, *overrides.Set) {
	t.Helper()
	p, err := policy.Parse([]byte(overSrc))
	if err != nil {
		t.Fatal(err)
	}
	set := overrides.NewSet(p)
	for i := range os {
		if err := set.Put(&os[i]); err != nil {
			t.Fatal(err)
		}
	}
	l, err := limiter.New(p, st, append(opts, limiter.WithOverrides(set))...)
	if err != nil {
		t.Fatal(err)
	}
	return l, set
}

func statusOf(t *testing.T, res limiter.Result, name string) limiter.LimitStatus {
	t.Helper()
	for _, st := range res.Limits {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no status of %q in %+v", name, res.Limits)
	return limiter.LimitStatus{}
}

// A deny override refuses its keys whatever their state, takes nothing
// from the other limits, and says so in the status (JSON "denied": true,
// "override": {"match": ...}) and in sluice_override_decisions_total.
func TestOverrideDeny(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, _ := overLimiter(t, memstore.New(), []overrides.Override{
		{Name: "api", Match: map[string]string{"tenant": "bad"}, Params: overrides.Params{Deny: true}},
	}, limiter.WithRegisterer(reg))
	ctx := context.Background()
	for range 3 {
		res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"tenant": "bad"}, Receipt: true})
		if err != nil {
			t.Fatal(err)
		}
		st := statusOf(t, res, "api")
		if res.Allowed || st.Allowed || !st.Denied || st.Override == nil || !res.Receipt.Empty() {
			t.Fatalf("a denied key was not refused by its override: %+v", res)
		}
		if g := statusOf(t, res, "global"); !g.Allowed || g.TokensRemaining != 1000 {
			t.Fatalf("a denied request took from another limit: %+v", g)
		}
		b, _ := json.Marshal(st)
		if !strings.Contains(string(b), `"denied":true`) || !strings.Contains(string(b), `"override":{"match":{"tenant":"bad"}}`) {
			t.Fatalf("status JSON %s", b)
		}
	}
	res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"tenant": "good"}})
	if err != nil || !res.Allowed || statusOf(t, res, "api").Override != nil {
		t.Fatalf("another key: %+v %v", res, err)
	}
	if b, _ := json.Marshal(statusOf(t, res, "api")); strings.Contains(string(b), "override") || strings.Contains(string(b), "denied") {
		t.Fatalf("a status without override: %s", b)
	}
	if n := testutil.ToFloat64(mustCounter(t, reg, "sluice_override_decisions_total", "api", limiter.ResultDenied)); n != 3 {
		t.Fatalf("sluice_override_decisions_total{api,denied} = %v, want 3", n)
	}
}

// mustCounter is the counter of metric name with labels limit and result.
func mustCounter(t *testing.T, reg *prometheus.Registry, name, limit, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			if ls["limit"] == limit && ls["result"] == result {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	return c
}

// An unlimited override admits every request of its keys without a store
// write for that limit, and counts them.
func TestOverrideUnlimited(t *testing.T) {
	st := memstore.New()
	l, set := overLimiter(t, st, []overrides.Override{
		{Name: "api", Match: map[string]string{"tenant": "vip"}, Params: overrides.Params{Unlimited: true}},
	})
	ctx := context.Background()
	for i := range 50 {
		res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"tenant": "vip"}, Cost: 5})
		if err != nil {
			t.Fatal(err)
		}
		if a := statusOf(t, res, "api"); !res.Allowed || !a.Allowed || a.Override == nil {
			t.Fatalf("request %d: unlimited refused: %+v", i, res)
		}
	}
	if n := st.Stats().Keys; n != 1 { // (only global's key)
		t.Fatalf("%d keys held, want 1: an unlimited limit wrote its key", n)
	}
	if total, _ := set.Get("api", map[string]string{"tenant": "vip"}).Matched(); total != 50 {
		t.Fatalf("matched_total %d, want 50", total)
	}
}

// A shadow override counts as if enforced and never refuses.
func TestOverrideShadow(t *testing.T) {
	l, _ := overLimiter(t, memstore.New(), []overrides.Override{
		{Name: "api", Match: map[string]string{"tenant": "try"}, Params: overrides.Params{Capacity: 2, Shadow: true}},
	})
	ctx := context.Background()
	refused := 0
	for range 5 {
		res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"tenant": "try"}})
		if err != nil {
			t.Fatal(err)
		}
		a := statusOf(t, res, "api")
		if !res.Allowed || !a.Shadow || a.Capacity != 2 {
			t.Fatalf("a shadow override refused or shows another limit: %+v", res)
		}
		if a.ShadowRefused {
			refused++
		}
	}
	if refused != 3 {
		t.Fatalf("%d would-be refusals, want 3", refused)
	}
}

// An override's parameters decide its keys on the policy's key by the
// SetLimit rule: raising an exhausted bucket's capacity from 10 to 100
// (and its rate from 1/s to 10/s) hands out nothing at once, then refills
// at the new rate; removing the override drops the tokens above the
// policy's capacity.
func TestOverrideNoBurst(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	st := memstore.New(memstore.WithClock(c))
	l, set := overLimiter(t, st, nil)
	testNoBurst(t, l, set, func(d time.Duration) { c.Advance(d) })
}

func testNoBurst(t *testing.T, l *limiter.Limiter, set *overrides.Set, advance func(time.Duration)) {
	t.Helper()
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
	acme := map[string]string{"tenant": "acme"}
	if err := set.Put(&overrides.Override{Name: "api", Match: acme, Params: overrides.Params{Capacity: 100, RefillPerSecond: 10}}); err != nil {
		t.Fatal(err)
	}
	if n := admitted(5); n != 0 {
		t.Fatalf("raised to 100: %d admitted at once from an exhausted bucket, want 0 (a burst)", n)
	}
	advance(time.Second)
	if n := admitted(30); n != 10 {
		t.Fatalf("a second at the raised rate of 10/s: %d admitted, want 10", n)
	}
	advance(10 * time.Second) // 100 tokens: full at the raised capacity
	if n := admitted(150); n != 100 {
		t.Fatalf("after 10 s at 10/s: %d admitted, want the raised capacity 100", n)
	}
	advance(10 * time.Second) // full again (100)
	if err := set.Delete("api", acme); err != nil {
		t.Fatal(err)
	}
	if n := admitted(30); n != 10 {
		t.Fatalf("lowered back to 10 from a full 100: %d admitted, want 10 (tokens above the capacity dropped)", n)
	}
	advance(time.Second)
	if n := admitted(5); n != 1 {
		t.Fatalf("a second at the policy's 1/s: %d admitted, want 1", n)
	}
}

// opaque hides a store's SpecConverter: a store that keeps one spec per
// key.
type opaque struct{ store.Store }

// On a store that does not convert specs, an override whose spec has
// another state tag keeps its state under a key of its own: it never
// reads the policy's state in other units.
func TestOverrideKeyOfItsOwn(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l, set := overLimiter(t, opaque{memstore.New(memstore.WithClock(c))}, nil)
	ctx := context.Background()
	d := map[string]string{"tenant": "acme"}
	for range 10 {
		if _, err := l.Check(ctx, limiter.Request{Descriptors: d}); err != nil {
			t.Fatal(err)
		}
	}
	if err := set.Put(&overrides.Override{Name: "api", Match: d, Params: overrides.Params{Capacity: 100, RefillPerSecond: 10}}); err != nil {
		t.Fatal(err)
	}
	res, err := l.Check(ctx, limiter.Request{Descriptors: d})
	if err != nil {
		t.Fatal(err)
	}
	if a := statusOf(t, res, "api"); !res.Allowed || a.TokensRemaining != 99 || a.Capacity != 100 || a.RefillPerSecond != 10 {
		t.Fatalf("an override on a store keeping one spec per key: %+v", a)
	}
}

// Without overrides for a limit, a check is as before: no status names
// an override, and the Len() == 0 path reads no clock.
func TestOverrideNone(t *testing.T) {
	l, _ := overLimiter(t, memstore.New(), nil)
	res, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"tenant": "x"}})
	if err != nil || !res.Allowed || res.Limits[0].Override != nil {
		t.Fatalf("%+v %v", res, err)
	}
}

// Settling a request an override decided returns its cost to the key
// under the override's spec; a pause applies to it too.
func TestOverrideSettleAndPause(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l, _ := overLimiter(t, memstore.New(memstore.WithClock(c)), []overrides.Override{
		{Name: "api", Match: map[string]string{"tenant": "big"}, Params: overrides.Params{Capacity: 100, RefillPerSecond: 10}},
	})
	ctx := context.Background()
	d := map[string]string{"tenant": "big"}
	res, err := l.Check(ctx, limiter.Request{Descriptors: d, Cost: 60, Receipt: true})
	if err != nil || !res.Allowed || statusOf(t, res, "api").TokensRemaining != 40 {
		t.Fatalf("a cost of 60 under a capacity of 100: %+v %v", res, err)
	}
	if err := l.Settle(ctx, res.Receipt, 10); err != nil {
		t.Fatal(err)
	}
	res, err = l.Check(ctx, limiter.Request{Descriptors: d, Peek: true})
	if err != nil || statusOf(t, res, "api").TokensRemaining != 90 {
		t.Fatalf("after settling 60 to 10: %+v %v, want 90 left", statusOf(t, res, "api"), err)
	}
	if _, err := l.Pause(ctx, d, time.Second, []string{"api"}); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Check(ctx, limiter.Request{Descriptors: d}); res.Allowed {
		t.Fatal("admitted during a pause")
	}
	c.Advance(time.Second + 100*time.Millisecond)
	if res, _ := l.Check(ctx, limiter.Request{Descriptors: d}); !res.Allowed {
		t.Fatalf("refused after the pause: %+v", res)
	}
}

// CheckMany (the Envoy service's admission): a deny of one request
// refuses the call and takes nothing; an override's spec decides its
// request's item.
func TestOverrideCheckMany(t *testing.T) {
	l, _ := overLimiter(t, memstore.New(), []overrides.Override{
		{Name: "api", Match: map[string]string{"tenant": "bad"}, Params: overrides.Params{Deny: true}},
		{Name: "api", Match: map[string]string{"tenant": "big"}, Params: overrides.Params{Capacity: 100}},
	})
	ctx := context.Background()
	out, err := l.CheckMany(ctx, []limiter.Request{{Descriptors: map[string]string{"tenant": "big"}, Cost: 50}, {Descriptors: map[string]string{"tenant": "bad"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Allowed || !statusOf(t, out.Results[1], "api").Denied || out.Results[1].DeniedBy() != "api" {
		t.Fatalf("a call with a denied request: %+v", out)
	}
	out, err = l.CheckMany(ctx, []limiter.Request{{Descriptors: map[string]string{"tenant": "big"}, Cost: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if a := statusOf(t, out.Results[0], "api"); !out.Allowed || a.TokensRemaining != 50 || a.Capacity != 100 {
		t.Fatalf("the denied call took from the others, or the override did not decide: %+v", a)
	}
}

// A refusal under an override is logged with the override's match (and
// denied for a deny).
func TestOverrideLogged(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	l, _ := overLimiter(t, memstore.New(), []overrides.Override{
		{Name: "api", Match: map[string]string{"tenant": "bad"}, Params: overrides.Params{Deny: true}},
	}, limiter.WithLogger(log))
	if _, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"tenant": "bad"}}); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, `"override":{"match":{"tenant":"bad"}}`) || !strings.Contains(s, `"denied":true`) {
		t.Fatalf("log: %s", s)
	}
}
