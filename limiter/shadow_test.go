package limiter_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
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
  - name: slots
    key: "t:{t}"
    max_in_flight: 1
    lease_ttl: 30s
    shadow: true
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
		if by["slots"].ShadowRefused || by["slots"].TokensRemaining != 1 {
			t.Fatalf("request %d: rule: a shadow in-flight cap is peeked, holding no slot: %+v", i, by["slots"])
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
	l := limiterOver(t, shadowSrc, memstore.New(memstore.WithClock(c)), limiter.WithShadow())
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
	}
}
