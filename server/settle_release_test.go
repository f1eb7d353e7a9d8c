package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// countingStore counts the limiter's store calls after a check.
type countingStore struct {
	store.Store
	adjusts, releases, both atomic.Int64
}

func (s *countingStore) Adjust(ctx context.Context, adj []store.Adjustment) error {
	s.adjusts.Add(1)
	return s.Store.Adjust(ctx, adj)
}

func (s *countingStore) Release(ctx context.Context, slots store.Slots) error {
	s.releases.Add(1)
	return s.Store.Release(ctx, slots)
}

func (s *countingStore) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	s.both.Add(1)
	return store.AdjustRelease(ctx, s.Store, adj, slots)
}

// /v1/settle with "release": true settles the receipt and frees the
// lease's in-flight slot in one store call; a settle refused for its costs
// frees nothing, one refused because the receipt was settled already
// still frees the slot.
func TestSettleRelease(t *testing.T) {
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: memstore.New(memstore.WithClock(sluice.NewManualClock(time.Unix(1_800_000_000, 0))))}
	reg := prometheus.NewRegistry()
	l, err := limiter.New(p, st, limiter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, func(c *server.Config) { c.Limiter, c.Gatherer, c.Registerer = l, reg, reg })
	check := func() (string, bool) { // (cost 1: the tenant's 3 tokens last)
		t.Helper()
		_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm", "api_key": "k"}, "cost": 1}`)
		lease, _ := m["lease"].(string)
		return lease, m["allowed"] == true
	}
	lease, ok := check()
	if !ok || lease == "" {
		t.Fatal("the first check is admitted with a lease")
	}
	if _, ok := check(); ok {
		t.Fatal("max_in_flight 1: a second check waits for the slot")
	}
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": -1, "release": true}`); resp.StatusCode != 400 || m["code"] != "bad_request" {
		t.Fatalf("a bad cost: %d %v", resp.StatusCode, m)
	}
	if _, ok := check(); ok {
		t.Fatal("rule: a settle refused for its cost frees nothing")
	}
	st.adjusts.Store(0)
	st.releases.Store(0)
	resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": 0, "release": true}`)
	if resp.StatusCode != 200 || m["settled"] != true || m["released"] != true {
		t.Fatalf("settle and release: %d %v", resp.StatusCode, m)
	}
	if n, o := st.both.Load(), st.adjusts.Load()+st.releases.Load(); n != 1 || o != 0 {
		t.Fatalf("rule: settle and release in one store call: %d AdjustRelease, %d other calls", n, o)
	}
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 0}`)
	if ten := m["limits"].([]any)[1].(map[string]any); ten["tokens_remaining"] != 3.0 {
		t.Fatalf("rule: settled 1 -> 0 (refused checks take nothing): 3 of 3 left: %v", ten)
	}
	lease2, ok := check()
	if !ok {
		t.Fatal("rule: the slot is free after settle with release")
	}
	// Settled already: 409, and the slot freed all the same.
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease2+`", "actual_cost": 1}`); resp.StatusCode != 200 {
		t.Fatalf("a plain settle: %d %v", resp.StatusCode, m)
	}
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease2+`", "actual_cost": 1, "release": true}`); resp.StatusCode != 409 || m["code"] != "already_settled" {
		t.Fatalf("settled already: %d %v", resp.StatusCode, m)
	}
	if _, ok := check(); !ok {
		t.Fatal("rule: settle with release on a receipt settled already still frees the slot")
	}
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "nope", "actual_cost": 1, "release": true}`); resp.StatusCode != 404 || m["code"] != "unknown_lease" {
		t.Fatalf("unknown lease: %d %v", resp.StatusCode, m)
	}
}
