package limiter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

const spendSrc = `
prices:
  gpt-4o: {input: 2.50, output: 10.00, cached_input: 1.25}
limits:
  - name: rpm
    key: "team:{team}"
    capacity: 100
    refill: 100/m
  - name: tpm
    key: "team:{team}"
    capacity: 1000000
    refill: 1000000/m
    unit: tokens
  - name: budget
    key: "team:{team}"
    algorithm: quota
    period: month
    timezone: Europe/Berlin
    limit: 0.45
    unit: usd
`

func spendLimiter(t *testing.T, opts ...memstore.Option) *limiter.Limiter {
	t.Helper()
	p, err := policy.Parse([]byte(spendSrc))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, memstore.New(opts...))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// longPrompt is an estimate of $0.10: 20,000 input tokens ($0.05) and
// 5,000 output tokens at most ($0.05).
var longPrompt = policy.Usage{Model: "gpt-4o", InputTokens: 20_000, OutputTokens: 5_000}

func checkSpend(t *testing.T, l *limiter.Limiter, est *policy.Usage) limiter.Result {
	t.Helper()
	desc := map[string]string{"team": "x"}
	costs, err := l.UsageCosts(desc, est, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Check(context.Background(), limiter.Request{Descriptors: desc, Costs: costs, Receipt: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func spendStatus(res limiter.Result, name string) limiter.LimitStatus {
	for _, st := range res.Limits {
		if st.Name == name {
			return st
		}
	}
	return limiter.LimitStatus{}
}

// TestSpendConcurrentBudget is LiteLLM's reproduction (BerriAI/litellm
// #34732): 5 concurrent calls with long prompts against a $0.45 budget
// admit no more than $0.45 of reserved spend.
func TestSpendConcurrentBudget(t *testing.T) {
	l := spendLimiter(t)
	var mu sync.Mutex
	var admitted int64
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			res := checkSpend(t, l, &longPrompt)
			if res.Allowed {
				mu.Lock()
				admitted += spendStatus(res, "budget").TokenCost
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 400_000 {
		t.Fatalf("admitted %s dollars of spend, want 4 calls of $0.10 (0.400000) of the $0.45", policy.FormatMicroUSD(admitted))
	}
}

func TestSpendSettle(t *testing.T) {
	l := spendLimiter(t)
	res := checkSpend(t, l, &longPrompt)
	if !res.Allowed || spendStatus(res, "budget").TokenCost != 100_000 || spendStatus(res, "tpm").TokenCost != 25_000 || spendStatus(res, "rpm").TokenCost != 1 {
		t.Fatalf("%+v", res.Limits)
	}
	// The call used 20,000 input tokens of which 10,000 cached, and 1,000
	// output: 10,000*2.5 + 10,000*1.25 + 1,000*10 = 47,500 micro-dollars.
	used := policy.Usage{Model: "gpt-4o", InputTokens: 20_000, CachedInputTokens: 10_000, OutputTokens: 1_000}
	act, err := l.UsageActuals(res.Receipt, used, nil)
	if err != nil {
		t.Fatal(err)
	}
	if act["budget"] != 47_500 || act["tpm"] != 21_000 || len(act) != 2 {
		t.Fatalf("actuals %v", act)
	}
	if err := l.SettleCosts(context.Background(), res.Receipt, limiter.KeepCost, act); err != nil {
		t.Fatal(err)
	}
	peek := checkSpend(t, l, nil)
	if got := spendStatus(peek, "budget").TokensRemaining; got != 450_000-47_500 {
		t.Fatalf("remaining %d micro-dollars after the settle, want %d", got, 450_000-47_500)
	}
	// A call that used more than the budget has left is charged into debt:
	// the next call, even one without an estimate, is refused.
	res = checkSpend(t, l, &longPrompt)
	big := policy.Usage{Model: "gpt-4o", InputTokens: 200_000}
	act, _ = l.UsageActuals(res.Receipt, big, nil)
	if err := l.SettleCosts(context.Background(), res.Receipt, limiter.KeepCost, act); err != nil {
		t.Fatal(err)
	}
	if r := checkSpend(t, l, nil); r.Allowed {
		t.Fatalf("admitted past the budget: %+v", r.Limits)
	}
}

func TestSpendUnknownModel(t *testing.T) {
	l := spendLimiter(t)
	_, err := l.UsageCosts(map[string]string{"team": "x"}, &policy.Usage{Model: "gpt-9", InputTokens: 1}, nil)
	if !errors.Is(err, policy.ErrUnknownModel) {
		t.Fatalf("%v", err)
	}
	// A caller's own cost for the usd limit wins (no price needed).
	c, err := l.UsageCosts(map[string]string{"team": "x"}, &policy.Usage{Model: "gpt-9", InputTokens: 1}, map[string]int64{"budget": 5, "tpm": 7})
	if err != nil || c["budget"] != 5 || c["tpm"] != 7 {
		t.Fatalf("%v %v", c, err)
	}
	// No limit counting usage applies: costs as given.
	if c, err := l.UsageCosts(map[string]string{"other": "x"}, &longPrompt, nil); err != nil || c != nil {
		t.Fatalf("%v %v", c, err)
	}
	// An estimate above the budget can never be admitted.
	_, err = l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"team": "x"}, Costs: map[string]int64{"budget": 450_001}})
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("%v", err)
	}
}

// TestSpendMonthBoundaryBerlin: the budget spent on the last evening of
// January in Berlin is whole again at midnight of February 1st, Berlin
// time (23:00 UTC).
func TestSpendMonthBoundaryBerlin(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip(err)
	}
	clock := sluice.NewManualClock(time.Date(2026, 1, 31, 23, 59, 0, 0, berlin))
	l := spendLimiter(t, memstore.WithClock(clock))
	for range 4 {
		if !checkSpend(t, l, &longPrompt).Allowed {
			t.Fatal("refused within the budget")
		}
	}
	if r := checkSpend(t, l, &longPrompt); r.Allowed {
		t.Fatal("a fifth $0.10 admitted in a $0.45 month")
	} else if ra := r.RetryAfter; ra != time.Minute {
		t.Fatalf("retry after %v, want the minute to Berlin's midnight", ra)
	}
	clock.Set(time.Date(2026, 1, 31, 22, 59, 59, 0, time.UTC)) // 23:59:59 in Berlin
	if checkSpend(t, l, &longPrompt).Allowed {
		t.Fatal("admitted before the month ends in Berlin")
	}
	clock.Set(time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC)) // February 1st, 00:00 in Berlin
	if r := checkSpend(t, l, &longPrompt); !r.Allowed || spendStatus(r, "budget").TokensRemaining != 350_000 {
		t.Fatalf("the new month's budget: %+v", r.Limits)
	}
}
