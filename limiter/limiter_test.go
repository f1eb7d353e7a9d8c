package limiter_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

const src = `
limits:
  - name: global
    key: "global"
    capacity: 1000
    refill_per_second: 500
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 3
    refill_per_second: 1
  - name: tenant_export
    key: "tenant:{tenant}:route:{route}"
    when: {route: "/export"}
    capacity: 60
    refill_per_second: 1
  - name: user_burst
    key: "user:{user}"
    capacity: 5
    refill_per_second: 5
  - name: user_daily
    key: "user:{user}"
    algorithm: sliding_window
    limit: 8
    window: 24h
  - name: tool_calls
    key: "api_key:{api_key}"
    max_in_flight: 2
    lease_ttl: 30s
costs:
  - when: {route: "/export"}
    cost: 20
`

var epoch = time.Unix(1_800_000_000, 0)

func newLimiter(t *testing.T, opts ...limiter.Option) (*limiter.Limiter, *sluice.ManualClock) {
	t.Helper()
	c := sluice.NewManualClock(epoch)
	return limiterOver(t, src, memstore.New(memstore.WithClock(c)), opts...), c
}

// limiterOver is a limiter enforcing the policy source over st.
func limiterOver(t *testing.T, source string, st store.Store, opts ...limiter.Option) *limiter.Limiter {
	t.Helper()
	p, err := policy.Parse([]byte(source))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func check(t *testing.T, l *limiter.Limiter, req limiter.Request) limiter.Result {
	t.Helper()
	r, err := l.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func status(r limiter.Result, name string) limiter.LimitStatus {
	for _, s := range r.Limits {
		if s.Name == name {
			return s
		}
	}
	return limiter.LimitStatus{}
}

// A request refused by its tenant bucket leaves the global bucket unchanged.
func TestRefusedByTenantLeavesGlobal(t *testing.T) {
	l, _ := newLimiter(t)
	acme := limiter.Request{Descriptors: map[string]string{"tenant": "acme"}}
	for range 3 {
		if r := check(t, l, acme); !r.Allowed || len(r.Limits) != 2 {
			t.Fatalf("%+v", r)
		}
	}
	r := check(t, l, acme)
	if r.Allowed || r.RetryAfter != time.Second || !status(r, "global").Allowed || status(r, "tenant_api").Allowed {
		t.Fatalf("fourth: %+v", r)
	}
	peek := check(t, l, limiter.Request{Descriptors: map[string]string{}, Peek: true})
	if g := status(peek, "global"); g.TokensRemaining != 997 {
		t.Fatalf("global after the refusal: %d left, want 997", g.TokensRemaining)
	}
}

func TestCostsAndCostErrors(t *testing.T) {
	l, _ := newLimiter(t)
	exp := map[string]string{"tenant": "t1", "route": "/export"}
	_, err := l.Check(context.Background(), limiter.Request{Descriptors: exp})
	var ce *limiter.CostError
	if !errors.As(err, &ce) || ce.Limit != "tenant_api" || ce.Cost != 20 || ce.Capacity != 3 || !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("policy cost 20 against tenant_api's 3: %v", err)
	}
	r := check(t, l, limiter.Request{Descriptors: map[string]string{"route": "/export", "user": "u"}, Cost: 2})
	if !r.Allowed || r.Cost != 2 || status(r, "user_burst").TokensRemaining != 3 {
		t.Fatalf("own cost wins: %+v", r)
	}
	if _, err := l.Check(context.Background(), limiter.Request{Cost: -1}); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("negative: %v", err)
	}
	if r := check(t, l, limiter.Request{Descriptors: map[string]string{"nothing": "applies"}}); !r.Allowed || len(r.Limits) != 1 {
		t.Fatalf("only global applies: %+v", r)
	}
}

// One descriptor set carries a burst limit and a daily limit at once.
func TestBurstAndDailyTogether(t *testing.T) {
	l, c := newLimiter(t)
	u := limiter.Request{Descriptors: map[string]string{"user": "ann"}}
	admitted := 0
	for range 40 {
		if check(t, l, u).Allowed {
			admitted++
		}
		c.Advance(time.Second) // the burst refills 5/s: only the daily limit binds
	}
	if admitted != 8 {
		t.Fatalf("admitted %d in 40 s, want the daily 8", admitted)
	}
	r := check(t, l, u)
	if st := status(r, "user_daily"); st.Allowed || st.Algorithm != "sliding_window" || r.RetryAfter < 18*time.Hour { // the windows align to the Unix epoch: the next day starts in 16 h, then 1/8 of it decays
		t.Fatalf("daily: %+v retry %v", st, r.RetryAfter)
	}
}

func TestInFlightLeases(t *testing.T) {
	l, _ := newLimiter(t)
	k := limiter.Request{Descriptors: map[string]string{"api_key": "k1"}}
	r1, r2 := check(t, l, k), check(t, l, k)
	if !r1.Allowed || !r2.Allowed || r1.Slots.ID == "" {
		t.Fatalf("%+v %+v", r1, r2)
	}
	if r := check(t, l, k); r.Allowed || status(r, "tool_calls").Allowed {
		t.Fatalf("third: %+v", r)
	}
	if err := l.Release(context.Background(), r1.Slots); err != nil {
		t.Fatal(err)
	}
	if r := check(t, l, k); !r.Allowed {
		t.Fatalf("after release: %+v", r)
	}
}

// Concurrent mixed requests never over-admit any bucket, checked against
// per-bucket accounting at a frozen instant.
func TestConcurrentNeverOverAdmits(t *testing.T) {
	l, _ := newLimiter(t)
	var mu sync.Mutex
	perTenant := map[string]int{}
	users := map[string]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 500 {
				ten, usr := fmt.Sprint("t", rng.IntN(5)), fmt.Sprint("u", rng.IntN(7))
				r, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"tenant": ten, "user": usr}})
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					mu.Lock()
					perTenant[ten]++
					users[usr]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for ten, n := range perTenant {
		if n > 3 {
			t.Errorf("tenant %s admitted %d > 3", ten, n)
		}
		total += n
	}
	for u, n := range users {
		if n > 5 {
			t.Errorf("user %s admitted %d > 5", u, n)
		}
	}
	if g := status(check(t, l, limiter.Request{Peek: true}), "global"); g.TokensRemaining != int64(1000-total) {
		t.Errorf("global: %d left after %d admitted", g.TokensRemaining, total)
	}
}

func TestMaxWaitHoldsUntilAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		l, err := limiter.New(p, memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		req := limiter.Request{Descriptors: map[string]string{"tenant": "w"}}
		for range 3 {
			check(t, l, req)
		}
		start := time.Now()
		req.MaxWait = 2 * time.Second
		if r := check(t, l, req); !r.Allowed || time.Since(start) != time.Second {
			t.Fatalf("%+v after %v", r, time.Since(start))
		}
		req.MaxWait = 500 * time.Millisecond
		if r := check(t, l, req); r.Allowed || time.Since(start) != time.Second {
			t.Fatalf("a wait beyond MaxWait must refuse at once: %+v after %v", r, time.Since(start))
		}
	})
}

func TestTelemetry(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	l, _ := newLimiter(t, limiter.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))), limiter.WithRegisterer(reg))
	req := limiter.Request{Descriptors: map[string]string{"tenant": "acme"}}
	for range 3 {
		check(t, l, req)
	}
	req.Retry = true
	check(t, l, req)
	var rec map[string]any
	if err := json.Unmarshal(bytes.SplitN(buf.Bytes(), []byte("\n"), 2)[0], &rec); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	for k, want := range map[string]any{"limiter": "tenant_api", "result": "rejected", "bucket_capacity": 3.0,
		"refill_per_second": 1.0, "token_cost": 1.0, "tokens_remaining": 0.0, "retry": true} {
		if rec[k] != want {
			t.Errorf("log field %s = %v, want %v (%v)", k, rec[k], want, rec)
		}
	}
	if got := testutil.ToFloat64(counter(t, reg, "tenant_api", "admitted", "original")); got != 3 {
		t.Errorf("admitted originals %v", got)
	}
	if got := testutil.ToFloat64(counter(t, reg, "tenant_api", "rejected", "retry")); got != 1 {
		t.Errorf("rejected retries %v", got)
	}
	out, _ := reg.Gather()
	names := []string{}
	for _, mf := range out {
		names = append(names, mf.GetName())
	}
	for _, want := range []string{"sluice_check_duration_seconds", "sluice_keys", "sluice_evictions_total", "sluice_decisions_total"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("metric %s missing from %v", want, names)
		}
	}
	// Per limit name, never per key.
	if strings.Contains(fmt.Sprint(out), "acme") {
		t.Error("a key leaked into metric labels")
	}
}

func counter(t *testing.T, reg *prometheus.Registry, limit, result, attempt string) prometheus.Collector {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["limit"] == limit && labels["result"] == result && labels["attempt"] == attempt {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
}

// A new policy keeps the state of unchanged limits.
func TestSetPolicyKeepsUnchangedState(t *testing.T) {
	l, _ := newLimiter(t)
	req := limiter.Request{Descriptors: map[string]string{"tenant": "acme"}}
	for range 3 {
		check(t, l, req)
	}
	p2, err := policy.Parse([]byte(strings.Replace(src, "capacity: 1000", "capacity: 2000", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(p2); err != nil {
		t.Fatal(err)
	}
	if r := check(t, l, req); r.Allowed || status(r, "global").Capacity != 2000 {
		t.Fatalf("tenant state lost on reload: %+v", r)
	}
}

// Several requests as one: a refusal of any consumes nothing anywhere; a
// shared bucket takes the sum of the costs.
func TestCheckManyAllOrNothing(t *testing.T) {
	l, _ := newLimiter(t)
	a := limiter.Request{Descriptors: map[string]string{"tenant": "a"}}
	b := limiter.Request{Descriptors: map[string]string{"tenant": "b"}, Cost: 3}
	r, err := l.CheckMany(context.Background(), []limiter.Request{a, b})
	if err != nil || !r.Allowed || len(r.Results) != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	if g := status(r.Results[0], "global"); g.TokensRemaining != 996 { // 1 + 3 from the shared global bucket
		t.Fatalf("global %+v", g)
	}
	// b's tenant is empty now: the pair is refused, and a's tenant untouched.
	r, err = l.CheckMany(context.Background(), []limiter.Request{a, {Descriptors: map[string]string{"tenant": "b"}}})
	if err != nil || r.Allowed || !r.Results[0].Allowed || r.Results[1].Allowed || r.RetryAfter != time.Second {
		t.Fatalf("%+v %v", r, err)
	}
	peek := check(t, l, limiter.Request{Descriptors: map[string]string{"tenant": "a"}, Peek: true})
	if status(peek, "tenant_api").TokensRemaining != 2 || status(peek, "global").TokensRemaining != 996 {
		t.Fatalf("a refused pair consumed: %+v", peek.Limits)
	}
	// Two requests on one tenant: 2 + 2 > 3 can never pass.
	two := limiter.Request{Descriptors: map[string]string{"tenant": "c"}, Cost: 2}
	if _, err := l.CheckMany(context.Background(), []limiter.Request{two, two}); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("shared bucket over capacity: %v", err)
	}
}

func TestSettle(t *testing.T) {
	l, c := newLimiter(t)
	req := limiter.Request{Descriptors: map[string]string{"user": "llm"}, Cost: 5, Receipt: true}
	r := check(t, l, req) // user_burst: 5 of 5, user_daily: 5 of 8
	if !r.Allowed || r.Receipt.Empty() {
		t.Fatalf("%+v", r)
	}
	if err := l.Settle(context.Background(), r.Receipt, 2); err != nil { // used 2: 3 come back everywhere
		t.Fatal(err)
	}
	peek := check(t, l, limiter.Request{Descriptors: map[string]string{"user": "llm"}, Peek: true})
	if status(peek, "user_burst").TokensRemaining != 3 || status(peek, "user_daily").TokensRemaining != 6 || status(peek, "global").TokensRemaining != 998 {
		t.Fatalf("after settling 5 -> 2: %+v", peek.Limits)
	}
	if r := check(t, l, limiter.Request{Descriptors: map[string]string{"tenant": "y"}}); !r.Receipt.Empty() {
		t.Fatal("a receipt nobody asked for")
	}
	r = check(t, l, limiter.Request{Descriptors: map[string]string{"tenant": "x"}, Cost: 1, Receipt: true})
	if err := l.Settle(context.Background(), r.Receipt, 4); err != nil { // used 4: 3 more, tenant_api goes into debt
		t.Fatal(err)
	}
	if r := check(t, l, limiter.Request{Descriptors: map[string]string{"tenant": "x"}}); r.Allowed || r.RetryAfter != 2*time.Second {
		t.Fatalf("after the excess: %+v", r)
	}
	if err := l.Settle(context.Background(), r.Receipt, -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("negative: %v", err)
	}
	_ = c
}

// keyStore records the keys a limiter asks for. (It embeds the interface,
// so memstore's TakeBorrowed is hidden and every call comes to Take.)
type keyStore struct {
	store.Store
	keys []string
}

func (k *keyStore) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	for _, it := range items {
		k.keys = append(k.keys, it.Key)
	}
	return k.Store.Take(ctx, items)
}

// A limit's hash_tag leads its store keys, so that limits with the same
// tag share a Redis Cluster hash slot; Check and CheckMany agree.
func TestHashTagLeadsStoreKeys(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    hash_tag: "{tenant}"
    capacity: 5
    refill_per_second: 1
  - name: tenant_user
    key: "tenant:{tenant}:user:{user}"
    hash_tag: "{tenant}"
    capacity: 5
    refill_per_second: 1
  - name: global
    key: global
    capacity: 5
    refill_per_second: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	ks := &keyStore{Store: memstore.New()}
	l, err := limiter.New(p, ks)
	if err != nil {
		t.Fatal(err)
	}
	desc := map[string]string{"tenant": "acme", "user": "bob"}
	r, err := l.Check(context.Background(), limiter.Request{Descriptors: desc})
	if err != nil || !r.Allowed {
		t.Fatalf("%+v %v", r, err)
	}
	// name@tag: the spec's state tag (1 token = 1e9 units at 1/s).
	want := []string{"{acme}tenant_api@ugjdgxs:tenant:acme", "{acme}tenant_user@ugjdgxs:tenant:acme:user:bob", "global@ugjdgxs:global"}
	if fmt.Sprint(ks.keys) != fmt.Sprint(want) {
		t.Fatalf("keys %q, want %q", ks.keys, want)
	}
	if r.Limits[0].Key != "tenant:acme" || r.Limits[1].Key != "tenant:acme:user:bob" {
		t.Fatalf("statuses show the store keys: %+v", r.Limits)
	}
	ks.keys = nil
	if _, err := l.CheckMany(context.Background(), []limiter.Request{{Descriptors: desc}}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ks.keys) != fmt.Sprint(want) {
		t.Fatalf("CheckMany keys %q, want %q", ks.keys, want)
	}
}

// On a refusal nothing is taken, and every status reports its limit as it
// is, with allowed saying whether that limit alone would have admitted:
// the example policy's tenant_api (100, 20/s) and tenant_export (60, 1/s).
func TestRefusalReportsLimitsAsTheyAre(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	raw, err := os.ReadFile("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := limiterOver(t, string(raw), memstore.New(memstore.WithClock(c)))
	desc := map[string]string{"tenant": "t1", "route": "/export"}
	if r := check(t, l, limiter.Request{Descriptors: desc, Cost: 50}); !r.Allowed {
		t.Fatalf("first: %+v", r)
	}
	c.Advance(time.Second)
	r := check(t, l, limiter.Request{Descriptors: desc, Cost: 30})
	peek := check(t, l, limiter.Request{Descriptors: desc, Peek: true})
	if r.Allowed {
		t.Fatalf("30 more on tenant_export (11 left) was admitted: %+v", r)
	}
	for _, name := range []string{"global", "tenant_api", "tenant_export"} {
		got, want := status(r, name), status(peek, name)
		if got.TokensRemaining != want.TokensRemaining || got.Allowed != (name != "tenant_export") {
			t.Errorf("%s in the refusal: %d left, allowed %v; a peek right after: %d left", name, got.TokensRemaining, got.Allowed, want.TokensRemaining)
		}
	}
	if got := status(r, "tenant_api").TokensRemaining; got != 70 {
		t.Errorf("tenant_api: %d left, want 70 (100 - 50 + 20)", got)
	}
}

// A reloaded limit keeps its state when its state means the same under the
// new parameters (a token bucket in the same units: here capacity 3 -> 5
// at the same rate), and starts anew when it would not (other units).
func TestSetPolicyChangedLimits(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	st := memstore.New(memstore.WithClock(c))
	pol := func(capacity int, rate string) *policy.Policy {
		p, err := policy.Parse(fmt.Appendf(nil, "limits:\n  - name: t\n    key: \"t:{t}\"\n    capacity: %d\n    refill: %q\n", capacity, rate))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	l, err := limiter.New(pol(3, "1/s"), st)
	if err != nil {
		t.Fatal(err)
	}
	desc := map[string]string{"t": "a"}
	check(t, l, limiter.Request{Descriptors: desc, Cost: 3})
	if err := l.SetPolicy(pol(5, "1/s")); err != nil {
		t.Fatal(err)
	}
	if r := check(t, l, limiter.Request{Descriptors: desc, Peek: true}); r.Limits[0].TokensRemaining != 2 {
		t.Fatalf("capacity 3 -> 5 in the same units: %d left, want 2 (3 used of 5)", r.Limits[0].TokensRemaining)
	}
	if err := l.SetPolicy(pol(5, "1/m")); err != nil {
		t.Fatal(err)
	}
	if r := check(t, l, limiter.Request{Descriptors: desc, Peek: true}); r.Limits[0].TokensRemaining != 5 {
		t.Fatalf("1/s -> 1/m (other units): %d left, want 5 (a new bucket)", r.Limits[0].TokensRemaining)
	}
}

// Refusal records: durations in milliseconds, each kind with its own
// fields (an in-flight cap's max_in_flight and in_flight, not bucket
// fields), and redacted descriptors shown only as a hash.
func TestRefusalLogFields(t *testing.T) {
	var buf bytes.Buffer
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, `
redact: [api_key]
limits:
  - name: per_key
    key: "api_key:{api_key}"
    capacity: 1
    refill_per_second: 0.5
  - name: slots
    key: "user:{user}"
    max_in_flight: 1
    lease_ttl: 30s
`, memstore.New(memstore.WithClock(c)), limiter.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	k := map[string]string{"api_key": "sk-secret-123"}
	check(t, l, limiter.Request{Descriptors: k})
	check(t, l, limiter.Request{Descriptors: k})
	u := map[string]string{"user": "ann"}
	check(t, l, limiter.Request{Descriptors: u})
	check(t, l, limiter.Request{Descriptors: u})
	var recs []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 2 {
		t.Fatalf("want 2 refusal records, got %d: %s", len(recs), buf.String())
	}
	b, s := recs[0], recs[1]
	if b["limiter"] != "per_key" || b["retry_after_ms"] != 2000.0 || b["bucket_capacity"] != 1.0 || b["refill_per_second"] != 0.5 ||
		b["key"] != "api_key:#"+sha8("sk-secret-123") || strings.Contains(buf.String(), "sk-secret") {
		t.Errorf("bucket refusal: %v", b)
	}
	if _, ok := b["retry_after"]; ok {
		t.Errorf("raw nanoseconds logged: %v", b)
	}
	if s["limiter"] != "slots" || s["max_in_flight"] != 1.0 || s["in_flight"] != 1.0 || s["retry_after_ms"] != 30000.0 {
		t.Errorf("in-flight refusal: %v", s)
	}
	for _, f := range []string{"bucket_capacity", "refill_per_second", "tokens_remaining"} {
		if _, ok := s[f]; ok {
			t.Errorf("in-flight refusal carries bucket field %s: %v", f, s)
		}
	}
}

func sha8(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

// A full store's refusal names the key as statuses show it, redacted
// descriptors hashed, never the raw value or the store's internal prefix.
func TestFullErrorShowsTheRedactedKey(t *testing.T) {
	var buf bytes.Buffer
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, "redact: [api_key]\nlimits:\n  - name: per_key\n    key: \"api_key:{api_key}\"\n    capacity: 1\n    refill_per_second: 0.2\n",
		memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(1), memstore.WithRefuseWhenFull()), limiter.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	check(t, l, limiter.Request{Descriptors: map[string]string{"api_key": "secret-one"}})
	_, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"api_key": "secret-two"}})
	if !errors.Is(err, store.ErrFull) {
		t.Fatalf("want ErrFull: %v", err)
	}
	want := `new key "per_key api_key:#` + sha8("secret-two") + `" refused`
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "@") {
		t.Fatalf("error %q, want it to contain %q and neither the raw value nor the store prefix", err, want)
	}
	if strings.Contains(buf.String(), "secret-two") {
		t.Fatalf("raw value logged: %s", buf.String())
	}
}

// A peek is not a decision: not counted, not logged as a refusal, even on
// a bucket that would refuse.
func TestPeekIsNotCounted(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	l, _ := newLimiter(t, limiter.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))), limiter.WithRegisterer(reg))
	acme := map[string]string{"tenant": "acme"}
	r := check(t, l, limiter.Request{Descriptors: acme, Cost: 3, Receipt: true})
	if err := l.Settle(context.Background(), r.Receipt, 5); err != nil { // 2 tokens of debt
		t.Fatal(err)
	}
	before := testutil.ToFloat64(counter(t, reg, "tenant_api", "rejected", "original"))
	for range 5 {
		if r := check(t, l, limiter.Request{Descriptors: acme, Peek: true}); r.Allowed {
			t.Fatalf("peek on an empty bucket: %+v", r)
		}
	}
	if after := testutil.ToFloat64(counter(t, reg, "tenant_api", "rejected", "original")); after != before {
		t.Fatalf("peeks counted as refusals: %v -> %v", before, after)
	}
	if strings.Contains(buf.String(), "refused") {
		t.Fatalf("peeks logged as refusals: %s", buf.String())
	}
}
