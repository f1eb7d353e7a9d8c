package limiter_test

// sluice_evictions_total by reason, and a gate (new_key_gate) that holds a
// flood of new keys back at the key cap.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
)

const gatedPolicy = `limits:
  - name: tenant
    key: "tenant:{tenant}"
    capacity: 20
    refill_per_second: 0.001
  - name: user_daily
    key: "user:{tenant}:{user}"
    algorithm: sliding_window
    limit: 100
    window: 24h
    new_key_gate: tenant
`

// With a cap of 10 keys, a flood of new users under one tenant: the tenant
// limit admits 20 and refuses the rest, which create and evict nothing, so
// the other tenant's users keep their state; the 11 admitted new users
// beyond the cap are LRU evictions, counted as such, and idle ones apart.
func TestEvictionsByReasonAndAGatedFlood(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	reg := prometheus.NewRegistry()
	l := limiterOver(t, gatedPolicy, memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(10)), limiter.WithRegisterer(reg))
	legit := map[string]string{"tenant": "good", "user": "alice"}
	check(t, l, limiter.Request{Descriptors: legit}) // 2 keys: tenant:good, alice
	admitted := 0
	for i := range 200 {
		c.Advance(time.Millisecond)
		if check(t, l, limiter.Request{Descriptors: map[string]string{"tenant": "flood", "user": fmt.Sprint("u", i)}}).Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		t.Fatalf("%d flood requests admitted, want the tenant's 20", admitted)
	}
	lru := testutil.ToFloat64(evictions(t, reg, "lru"))
	idle := testutil.ToFloat64(evictions(t, reg, "idle"))
	// 2 + 1 (tenant:flood) + 20 users = 23 keys for 10 places: 13 evicted,
	// the oldest first (the legit tenant's two among them).
	if lru != 13 || idle != 0 {
		t.Fatalf("evictions: lru %v, idle %v; want 13 and 0", lru, idle)
	}
	// The legit tenant keeps working (its keys start anew: the bound of
	// docs/behaviour.md 4.3).
	if r := check(t, l, limiter.Request{Descriptors: legit}); !r.Allowed {
		t.Fatalf("the legit tenant is refused: %+v", r)
	}
	out, _ := reg.Gather()
	for _, mf := range out {
		if mf.GetName() == "sluice_evictions_total" && len(mf.GetMetric()) != 2 {
			t.Fatalf("want one series per reason: %v", mf)
		}
	}
	if strings.Contains(fmt.Sprint(out), "alice") {
		t.Fatal("a key in the metrics")
	}
}

// With room for the flood the tenant limit admits, the gate keeps the
// legit tenant's keys and their state: the 180 refused requests created
// nothing.
func TestAGateKeepsAFloodFromEvicting(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(30))
	l := limiterOver(t, gatedPolicy, s)
	legit := map[string]string{"tenant": "good", "user": "alice"}
	check(t, l, limiter.Request{Descriptors: legit})
	for i := range 200 {
		c.Advance(time.Millisecond)
		check(t, l, limiter.Request{Descriptors: map[string]string{"tenant": "flood", "user": fmt.Sprint("u", i)}})
	}
	if st := s.Stats(); st.Keys != 23 || st.Evictions != 0 {
		t.Fatalf("%+v: want 23 keys (2 legit, the flood's tenant and its 20 admitted users), none evicted", st)
	}
	r := check(t, l, limiter.Request{Descriptors: legit})
	if st := status(r, "user_daily"); !r.Allowed || st.TokensRemaining != 98 {
		t.Fatalf("alice: %+v, want her second request counted (98 left)", st)
	}
}

func evictions(t *testing.T, reg *prometheus.Registry, reason string) prometheus.Collector {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sluice_evictions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return m.GetCounter().GetValue() })
				}
			}
		}
	}
	t.Fatalf("no sluice_evictions_total{reason=%q}", reason)
	return nil
}
