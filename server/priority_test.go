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

const classesSrc = `
priorities:
  - name: interactive
  - name: batch
    reserve: 0.5
    max_queue_ms: 0
limits:
  - name: api
    key: "global"
    capacity: 10
    refill_per_second: 1
`

// /v1/check's "priority": a class's reserve, the class in the answer and
// in each status, an unknown class 400 unknown_priority.
func TestCheckPriority(t *testing.T) {
	p, err := policy.Parse([]byte(classesSrc))
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
	resp, m := post(t, ts, "/v1/check", `{"descriptors": {}, "cost": 5, "priority": "batch"}`)
	if resp.StatusCode != http.StatusOK || m["priority"] != "batch" {
		t.Fatalf("batch 5: %d %v", resp.StatusCode, m)
	}
	if st := m["limits"].([]any)[0].(map[string]any); st["priority"] != "batch" || st["tokens_remaining"] != 0.0 {
		t.Errorf("batch's status: %v", st)
	}
	if resp, m = post(t, ts, "/v1/check", `{"descriptors": {}, "cost": 1, "priority": "batch", "max_wait_ms": 60000, "reserve": true}`); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("batch 1 more (never waits): %d %v", resp.StatusCode, m)
	}
	if resp, m = post(t, ts, "/v1/check", `{"descriptors": {}, "cost": 5, "priority": "interactive"}`); resp.StatusCode != http.StatusOK || m["priority"] != "interactive" {
		t.Fatalf("interactive 5: %d %v", resp.StatusCode, m)
	}
	if resp, m = post(t, ts, "/v1/check", `{"descriptors": {}, "cost": 1}`); resp.StatusCode != http.StatusTooManyRequests || m["priority"] != nil {
		t.Fatalf("no class, empty bucket: %d %v", resp.StatusCode, m)
	}
	if resp, m = post(t, ts, "/v1/check", `{"descriptors": {}, "cost": 1, "priority": "bulk"}`); resp.StatusCode != http.StatusBadRequest || m["code"] != "unknown_priority" {
		t.Fatalf("unknown class: %d %v", resp.StatusCode, m)
	}
}
