package limiter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

const shadowSrc = `
limits:
  - name: enforced
    key: "t:{t}"
    capacity: 10
    refill_per_second: 0.001
  - name: trial
    key: "t:{t}"
    capacity: 2
    refill_per_second: 0.001
    shadow: true
`

// slotsSrc adds an in-flight cap (not a shadow one: a shadow cap is
// refused at load).
const slotsSrc = shadowSrc + `  - name: slots
    key: "t:{t}"
    max_in_flight: 1
    lease_ttl: 30s
`

// A shadow limit is evaluated and counted as if enforced but never
// refuses: its would-be refusals are reported (and counted apart), it
// takes tokens only when it would admit, and an enforced refusal takes
// nothing from it.
func TestShadowLimit(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	reg := prometheus.NewRegistry()
	l := limiterOver(t, shadowSrc, memstore.New(memstore.WithClock(c)), limiter.WithRegisterer(reg))
	ctx := context.Background()
	d := map[string]string{"t": "a"}
	for i := range 5 {
		res, err := l.Check(ctx, limiter.Request{Descriptors: d, Cost: 2, Receipt: true})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]limiter.LimitStatus{}
		for _, st := range res.Limits {
			by[st.Name] = st
		}
		if !res.Allowed || !by["trial"].Shadow || by["enforced"].Shadow {
			t.Fatalf("request %d: rule: shadow limits never refuse: %+v", i, res)
		}
		want := int64(10 - 2*(i+1))
		if i >= 2 {
			want += 2 // the settle after request 1
		}
		if by["enforced"].TokensRemaining != want {
			t.Fatalf("request %d: the enforced limit took its cost: %+v", i, by["enforced"])
		}
		if refused := i >= 1; by["trial"].ShadowRefused != refused || by["trial"].Allowed == refused {
			t.Fatalf("request %d: rule: the would-be decision is reported (capacity 2, cost 2): %+v", i, by["trial"])
		}
		if by["trial"].TokensRemaining != 0 {
			t.Fatalf("request %d: rule: a shadow refusal takes nothing (no debt): %+v", i, by["trial"])
		}
		if i == 1 {
			// Settling returns what was taken: the enforced limit's, not the shadow limit's refused cost.
			if err := l.Settle(ctx, res.Receipt, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 2 back from the settle: 10 - 5*2 + 2 = 2 left; an enforced refusal next.
	res, _ := l.Check(ctx, limiter.Request{Descriptors: d, Cost: 3})
	if res.Allowed {
		t.Fatalf("rule: enforced limits still refuse: %+v", res)
	}
	// requests 1-4, and the last (its cost 3 is above trial's capacity: a would-be refusal, not an error)
	if got := testutil.ToFloat64(counter(t, reg, "trial", "shadow_rejected", "original")); got != 5 {
		t.Fatalf("rule: shadow refusals are counted apart (result=shadow_rejected): %v", got)
	}
	if got := testutil.ToFloat64(counter(t, reg, "trial", "rejected", "original")); got != 0 {
		t.Fatalf("a shadow refusal is not a rejection: %v", got)
	}
}

// WithShadow (sluice serve --shadow) puts every limit in shadow mode.
func TestShadowAll(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, slotsSrc, memstore.New(memstore.WithClock(c)), limiter.WithShadow())
	for range 20 {
		res, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"t": "b"}, Cost: 3})
		if err != nil || !res.Allowed {
			t.Fatalf("rule: with every limit in shadow mode nothing is refused: %+v %v", res, err)
		}
	}
	res, _ := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"t": "b"}, Cost: 3})
	for _, st := range res.Limits {
		if st.Name == "enforced" && (!st.Shadow || !st.ShadowRefused) {
			t.Fatalf("the would-be refusal is reported: %+v", st)
		}
		if st.Name == "slots" && (st.ShadowRefused || st.TokensRemaining != 1) {
			t.Fatalf("rule: under WithShadow an in-flight cap is peeked, holding no slot: %+v", st)
		}
	}
}

// The metrics operators chart: near-limit admissions (under 20 % left),
// and each limit's configured capacity and refill, replaced on reload.
func TestLimitMetrics(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	reg := prometheus.NewRegistry()
	l := limiterOver(t, slotsSrc, memstore.New(memstore.WithClock(c)), limiter.WithRegisterer(reg))
	ctx := context.Background()
	l.Check(ctx, limiter.Request{Descriptors: map[string]string{"t": "n"}, Cost: 7}) // 3 of 10 left: not near
	l.Check(ctx, limiter.Request{Descriptors: map[string]string{"t": "m"}, Cost: 9}) // 1 of 10 left: near
	got := gather(t, reg)
	for name, want := range map[string]float64{
		"sluice_limit_near_total{enforced}": 1, "sluice_limit_capacity{enforced}": 10, "sluice_limit_refill_per_second{enforced}": 0.001,
		"sluice_limit_capacity{slots}": 1, "sluice_limit_refill_per_second{slots}": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	src := strings.Replace(slotsSrc, "capacity: 10", "capacity: 20", 1)
	pol, err := policy.Parse([]byte(src[:strings.Index(src, "  - name: trial")]))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(pol); err != nil {
		t.Fatal(err)
	}
	got = gather(t, reg)
	if got["sluice_limit_capacity{enforced}"] != 20 {
		t.Fatalf("rule: a reload sets the configured capacity: %v", got)
	}
	if _, ok := got["sluice_limit_capacity{slots}"]; ok {
		t.Fatal("rule: a limit no longer in the policy has no capacity series")
	}
}

// gather reads reg's counters and gauges as name{first label value}.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 {
				continue
			}
			name := mf.GetName() + "{" + m.GetLabel()[0].GetValue() + "}"
			switch {
			case m.Counter != nil:
				got[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[name] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

// A shadow in-flight cap is refused at load: shadow requests hold no slot,
// so it could never see one taken.
func TestShadowInFlightRefused(t *testing.T) {
	_, err := policy.Parse([]byte("limits:\n  - {name: s, key: x, max_in_flight: 2, lease_ttl: 30s, shadow: true}\n"))
	if err == nil || !strings.Contains(err.Error(), "holds no slot") {
		t.Fatalf("%v", err)
	}
}

// CheckMany (Envoy's multi-descriptor requests in policy mode) keeps
// shadow limits out of the all-or-nothing decision, as Check does.
func TestShadowCheckMany(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, shadowSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	req := limiter.Request{Descriptors: map[string]string{"t": "m"}, Cost: 2}
	for i := range 3 {
		out, err := l.CheckMany(ctx, []limiter.Request{req})
		if err != nil || !out.Allowed || !out.Results[0].Allowed {
			t.Fatalf("call %d: rule: a shadow limit refuses nothing in CheckMany either: %+v %v", i, out, err)
		}
		var trial limiter.LimitStatus
		for _, st := range out.Results[0].Limits {
			if st.Name == "trial" {
				trial = st
			}
		}
		if !trial.Shadow || trial.ShadowRefused != (i >= 1) {
			t.Fatalf("call %d: the would-be decision is reported (trial holds 2): %+v", i, trial)
		}
	}
	// Two requests sharing trial in one call: 4 > its capacity 2, a would-be refusal, not an error.
	out, err := l.CheckMany(ctx, []limiter.Request{req, req})
	if err != nil || !out.Allowed {
		t.Fatalf("rule: costs above a shadow limit's capacity are would-be refusals, not errors: %+v %v", out, err)
	}
}

// A settle naming a shadow limit that refused (and took nothing) settles
// the others and skips it.
func TestShadowSettleNamesARefusedShadow(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, shadowSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	d := map[string]string{"t": "s"}
	l.Check(ctx, limiter.Request{Descriptors: d, Cost: 2}) // trial now empty
	res, err := l.Check(ctx, limiter.Request{Descriptors: d, Cost: 2, Receipt: true})
	if err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	if err := l.SettleCosts(ctx, res.Receipt, limiter.KeepCost, map[string]int64{"trial": 1, "enforced": 0}); err != nil {
		t.Fatalf("rule: a refused shadow limit named in a settle is skipped, not unknown: %v", err)
	}
	res, _ = l.Check(ctx, limiter.Request{Descriptors: d, Peek: true})
	for _, st := range res.Limits {
		if st.Name == "enforced" && st.TokensRemaining != 8 {
			t.Fatalf("the enforced limit was settled (2 back: 8 left): %+v", st)
		}
	}
}
