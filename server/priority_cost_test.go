package server_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

// /v1/check: a cost above its class's view of a limit (batch, reserve
// 0.5: 5 of the 10 tokens, none of a capacity of 1) is 422
// cost_exceeds_capacity naming the limit, as a cost above the capacity,
// never a 429 whose retry hint comes true never; within the view, 200.
func TestCheckPriorityCostExceedsClass(t *testing.T) {
	p, err := policy.Parse([]byte(classesSrc + `
  - name: tiny
    key: "tiny:{tiny}"
    capacity: 1
    refill_per_second: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	l, err := limiter.New(p, memstore.New(memstore.WithClock(clock)), limiter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Limiter: l, Gatherer: reg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for _, c := range []struct {
		body, limit string
		status      int
	}{
		{`{"descriptors": {}, "cost": 6, "priority": "batch"}`, "api", http.StatusUnprocessableEntity},
		{`{"descriptors": {"tiny": "a"}, "cost": 1, "priority": "batch"}`, "tiny", http.StatusUnprocessableEntity},
		{`{"descriptors": {"tiny": "a"}, "cost": 1, "priority": "batch", "max_wait_ms": 1000, "reserve": true}`, "tiny", http.StatusUnprocessableEntity},
		{`{"descriptors": {}, "cost": 5, "priority": "batch"}`, "", http.StatusOK},
		{`{"descriptors": {"tiny": "a"}, "cost": 1, "priority": "interactive"}`, "", http.StatusOK},
	} {
		resp, m := post(t, ts, "/v1/check", c.body)
		if resp.StatusCode != c.status || c.limit != "" && (m["code"] != "cost_exceeds_capacity" || m["limit"] != c.limit) {
			t.Errorf("%s: %d %v, want %d (limit %q)", c.body, resp.StatusCode, m, c.status, c.limit)
		}
	}
}
