package limiter_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
)

const llmSrc = `
limits:
  - name: rpm
    key: "api_key:{api_key}"
    capacity: 60
    refill: "60/m"
  - name: tpm
    key: "api_key:{api_key}"
    capacity: 10000
    refill: "10000/m"
  - name: calls
    key: "api_key:{api_key}"
    max_in_flight: 4
    lease_ttl: 30s
`

func remaining(t *testing.T, l *limiter.Limiter, key string) map[string]int64 {
	t.Helper()
	res, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"api_key": key}, Peek: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, st := range res.Limits {
		out[st.Name] = st.TokensRemaining
	}
	return out
}

// "1 request and 1,200 tokens": Costs overrides Cost for the limits it
// names; each limit settles with its own actual cost.
func TestPerLimitCosts(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, llmSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	d := map[string]string{"api_key": "k"}
	res, err := l.Check(ctx, limiter.Request{Descriptors: d, Costs: map[string]int64{"tpm": 1200}, Receipt: true})
	if err != nil || !res.Allowed {
		t.Fatalf("%+v %v", res, err)
	}
	for _, st := range res.Limits {
		want := map[string]int64{"rpm": 1, "tpm": 1200, "calls": 1}[st.Name]
		if st.TokenCost != want {
			t.Errorf("%s: token_cost %d, want %d", st.Name, st.TokenCost, want)
		}
	}
	if got := remaining(t, l, "k"); got["rpm"] != 59 || got["tpm"] != 8800 {
		t.Fatalf("after the check: %v", got)
	}
	// tpm settles with its own actual (950), rpm keeps what it took.
	if err := l.SettleCosts(ctx, res.Receipt, limiter.KeepCost, map[string]int64{"tpm": 950}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, l, "k"); got["rpm"] != 59 || got["tpm"] != 9050 {
		t.Fatalf("after settling tpm to 950: %v", got)
	}
	l.Release(ctx, res.Slots)

	// actual for the others, actuals for the named ones
	res, _ = l.Check(ctx, limiter.Request{Descriptors: d, Costs: map[string]int64{"tpm": 100}, Receipt: true})
	if err := l.SettleCosts(ctx, res.Receipt, 0, map[string]int64{"tpm": 300}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, l, "k"); got["rpm"] != 59 || got["tpm"] != 8750 {
		t.Fatalf("after settling rpm to 0 and tpm to 300: %v", got)
	}
	l.Release(ctx, res.Slots)

	// a per-limit cost of 0 now, charged at settle
	res, _ = l.Check(ctx, limiter.Request{Descriptors: d, Costs: map[string]int64{"tpm": 0}, Receipt: true})
	if err := l.SettleCosts(ctx, res.Receipt, limiter.KeepCost, map[string]int64{"tpm": 750}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, l, "k"); got["rpm"] != 58 || got["tpm"] != 8000 {
		t.Fatalf("after a 0 estimate settled to 750: %v", got)
	}
	l.Release(ctx, res.Slots)
}

// Bad per-limit costs are clear errors and take nothing.
func TestPerLimitCostErrors(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, llmSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	d := map[string]string{"api_key": "k"}
	before := remaining(t, l, "k")
	for _, tc := range []struct {
		costs map[string]int64
		is    error
		msg   string
	}{
		{map[string]int64{"tokens": 5}, limiter.ErrUnknownLimit, `unknown limit "tokens": the applicable limits are "rpm", "tpm", "calls"`},
		{map[string]int64{"tpm": -1}, sluice.ErrInvalidCost, `cost -1 for limit "tpm" is negative`},
		{map[string]int64{"calls": 2}, sluice.ErrInvalidCost, `limit "calls" is an in-flight cap`},
		{map[string]int64{"tpm": 10001}, sluice.ErrCostExceedsCapacity, `tpm`},
	} {
		_, err := l.Check(ctx, limiter.Request{Descriptors: d, Costs: tc.costs})
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: %v, want %v containing %q", tc.costs, err, tc.is, tc.msg)
		}
		var ue *limiter.UnknownLimitError
		if errors.Is(tc.is, limiter.ErrUnknownLimit) && (!errors.As(err, &ue) || ue.Name != "tokens") {
			t.Errorf("%v: not an UnknownLimitError naming tokens: %v", tc.costs, err)
		}
		var ce *limiter.CostError
		if errors.Is(tc.is, sluice.ErrCostExceedsCapacity) && (!errors.As(err, &ce) || ce.Limit != "tpm" || ce.Capacity != 10000) {
			t.Errorf("%v: not a CostError naming tpm: %v", tc.costs, err)
		}
	}
	// a limit of the policy that does not apply to these descriptors
	if _, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"user": "u"}, Costs: map[string]int64{"tpm": 1}}); !errors.Is(err, limiter.ErrUnknownLimit) || !strings.Contains(err.Error(), "no limit applies") {
		t.Errorf("not applicable: %v", err)
	}
	if got := remaining(t, l, "k"); got["rpm"] != before["rpm"] || got["tpm"] != before["tpm"] {
		t.Fatalf("refused checks took: %v, was %v", got, before)
	}
	res, _ := l.Check(ctx, limiter.Request{Descriptors: d, Costs: map[string]int64{"tpm": 10}, Receipt: true})
	for _, actuals := range []map[string]int64{{"tokens": 1}, {"tpm": -5}} {
		if err := l.SettleCosts(ctx, res.Receipt, limiter.KeepCost, actuals); err == nil {
			t.Errorf("settle %v: no error", actuals)
		}
	}
	if err := l.SettleCosts(ctx, res.Receipt, -7, nil); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("settle with actual -7: %v", err)
	}
	if got := remaining(t, l, "k"); got["tpm"] != before["tpm"]-10 {
		t.Fatalf("refused settles changed tpm: %v", got)
	}
}

// CheckMany takes per-limit costs too.
func TestPerLimitCostsCheckMany(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, llmSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	res, err := l.CheckMany(ctx, []limiter.Request{{Descriptors: map[string]string{"api_key": "a"}, Costs: map[string]int64{"tpm": 500}},
		{Descriptors: map[string]string{"api_key": "b"}, Costs: map[string]int64{"rpm": 3}}})
	if err != nil || !res.Allowed {
		t.Fatalf("%+v %v", res, err)
	}
	if a, b := remaining(t, l, "a"), remaining(t, l, "b"); a["tpm"] != 9500 || a["rpm"] != 59 || b["rpm"] != 57 || b["tpm"] != 9999 {
		t.Fatalf("a %v, b %v", a, b)
	}
	if _, err := l.CheckMany(ctx, []limiter.Request{{Descriptors: map[string]string{"api_key": "a"}, Costs: map[string]int64{"tokens": 1}}}); !errors.Is(err, limiter.ErrUnknownLimit) {
		t.Fatalf("unknown: %v", err)
	}
}
