package limiter_test

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
)

const reusePolicy = `
limits:
  - name: tenant
    key: "tenant:{tenant}"
    capacity: 3
    refill_per_second: 1
  - name: user
    key: "user:{user}"
    hash_tag: "{user}"
    capacity: 10
    refill_per_second: 1
  - name: slots
    key: "slots:{user}"
    max_in_flight: 2
    lease_ttl: 10s
`

// Over memstore the limiter lends the store keys from a buffer it reuses:
// statuses (and leases and receipts) must still hold their own keys after
// any number of later checks, for new keys, existing ones, refusals, peeks
// of absent keys and concurrency slots alike.
func TestStatusKeysOutliveLaterChecks(t *testing.T) {
	l := limiterOver(t, reusePolicy, memstore.New())
	ctx := context.Background()
	type kept struct {
		r    limiter.Result
		want []string
	}
	var all []kept
	check := func(req limiter.Request, want ...string) {
		t.Helper()
		r, err := l.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, kept{r, want})
	}
	d := func(tenant, user string) map[string]string { return map[string]string{"tenant": tenant, "user": user} }
	check(limiter.Request{Descriptors: d("a", "x"), Receipt: true}, "tenant:a", "user:x", "slots:x") // new keys
	check(limiter.Request{Descriptors: d("a", "x")}, "tenant:a", "user:x", "slots:x")                // existing
	check(limiter.Request{Descriptors: d("b", "y"), Peek: true}, "tenant:b", "user:y", "slots:y")    // peek, absent
	check(limiter.Request{Descriptors: d("a", "x")}, "tenant:a", "user:x", "slots:x")                // refused (slots)
	check(limiter.Request{Descriptors: d("abcdefgh", "")}, "tenant:abcdefgh", "user:", "slots:")
	check(limiter.Request{Descriptors: map[string]string{"tenant": "c"}, Cost: 3}, "tenant:c")
	check(limiter.Request{Descriptors: map[string]string{"tenant": "c"}}, "tenant:c") // refused (tenant)
	if all[3].r.Allowed || all[6].r.Allowed {
		t.Fatalf("expected refusals: %+v %+v", all[3].r, all[6].r)
	}
	for i := range 50 { // churn the buffers
		check(limiter.Request{Descriptors: d("zzzzzzzzzzzzzzzz", "qqqqqqqqqqqq"), Peek: i%2 == 0}, "tenant:zzzzzzzzzzzzzzzz", "user:qqqqqqqqqqqq", "slots:qqqqqqqqqqqq")
	}
	for i, k := range all {
		if len(k.r.Limits) != len(k.want) {
			t.Fatalf("check %d: %d statuses, want %d", i, len(k.r.Limits), len(k.want))
		}
		for j, st := range k.r.Limits {
			if st.Key != k.want[j] {
				t.Errorf("check %d status %d: key %q, want %q", i, j, st.Key, k.want[j])
			}
		}
	}
	if keys := all[0].r.Slots.Keys; len(keys) != 1 || keys[0] != "slots:slots:x" {
		t.Errorf("lease keys %q", keys)
	}
	b, err := all[0].r.Receipt.MarshalBinary()
	if err != nil || string(b) == "" {
		t.Fatal(err)
	}
	want := `[{"limit":"tenant","key":"tenant@ugjdgxs:tenant:a","cost":1,`
	if string(b[:len(want)]) != want {
		t.Errorf("receipt %s", b)
	}
}

// CheckInto reuses the result's storage: after the first call, a decision
// on existing keys allocates nothing, and the statuses are rewritten.
func TestCheckIntoReuses(t *testing.T) {
	l := limiterOver(t, reusePolicy, memstore.New())
	ctx := context.Background()
	var res limiter.Result
	req := limiter.Request{Descriptors: map[string]string{"tenant": "a"}}
	if err := l.CheckInto(ctx, req, &res); err != nil || !res.Allowed || len(res.Limits) != 1 || res.Limits[0].Key != "tenant:a" {
		t.Fatalf("%+v %v", res, err)
	}
	if err := l.CheckInto(ctx, limiter.Request{Descriptors: map[string]string{"tenant": "a"}, Cost: 5}, &res); err == nil {
		t.Fatal("cost above capacity: no error")
	}
	if res.Allowed || len(res.Limits) != 0 {
		t.Fatalf("after an error the result is zero: %+v", res)
	}
	if err := l.CheckInto(ctx, limiter.Request{Descriptors: map[string]string{"tenant": "b"}, Cost: 3}, &res); err != nil || !res.Allowed || res.Limits[0].Key != "tenant:b" || res.Limits[0].TokensRemaining != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if raceEnabled {
		return // the race detector allocates
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := l.CheckInto(ctx, req, &res); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("CheckInto allocates %.1f times per call", allocs)
	}
}

// The decision counters spread increments over cells; their sum must still
// be exact under concurrent checks.
func TestDecisionCountsExactUnderConcurrency(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := limiterOver(t, reusePolicy, memstore.New(), limiter.WithRegisterer(reg))
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			var res limiter.Result
			req := limiter.Request{Descriptors: map[string]string{"tenant": "t"}, Retry: g%2 == 1}
			for range each {
				if err := l.CheckInto(context.Background(), req, &res); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var sum, retries float64
	for _, r := range []string{"admitted", "rejected"} {
		for _, a := range []string{"original", "retry"} {
			n := testutil.ToFloat64(counter(t, reg, "tenant", r, a))
			sum += n
			if a == "retry" {
				retries += n
			}
		}
	}
	if sum != goroutines*each || retries != goroutines*each/2 {
		t.Fatalf("counted %v decisions (%v retries), want %d (%d)", sum, retries, goroutines*each, goroutines*each/2)
	}
	if a := testutil.ToFloat64(counter(t, reg, "tenant", "admitted", "original")) + testutil.ToFloat64(counter(t, reg, "tenant", "admitted", "retry")); a < 3 || a > 5 {
		t.Fatalf("admitted %v, want the burst of 3 (and a refill or two)", a)
	}
}
