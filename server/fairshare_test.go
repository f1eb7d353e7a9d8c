package server_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

const shareSrc = `
limits:
  - name: provider_tpm
    key: "provider:{provider}"
    capacity: 10
    refill_per_second: 10
    fair_share: {by: tenant, weights: {acme: 3}, active_window: 10s}
`

// /v1/check with descriptors {provider, tenant}: the tenant's share while
// the bucket is contended, and the status's "fair_share".
func TestCheckFairShare(t *testing.T) {
	p, err := policy.Parse([]byte(shareSrc))
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
	ask := func(tenant string, cost int) (int, map[string]any) {
		t.Helper()
		resp, m := post(t, ts, "/v1/check", `{"descriptors": {"provider": "openai", "tenant": "`+tenant+`"}, "cost": `+strconv.Itoa(cost)+`}`)
		return resp.StatusCode, m
	}
	status := func(m map[string]any) map[string]any { return m["limits"].([]any)[0].(map[string]any) }
	// Uncontended: the bucket alone (6 of 10).
	if code, m := ask("zed", 1); code != http.StatusOK || status(m)["fair_share"].(map[string]any)["tenant"] != "zed" {
		t.Fatalf("zed: %d %v", code, m)
	}
	if code, m := ask("acme", 5); code != http.StatusOK || status(m)["fair_share"].(map[string]any)["weight"] != 3.0 {
		t.Fatalf("acme: %d %v", code, m)
	}
	// 4 left: contended. zed (weight 1 of 4): a token is 0.4 s of its
	// virtual time, within τ/2 = 0.5 s once, not twice.
	if code, m := ask("zed", 1); code != http.StatusOK {
		t.Fatalf("zed contended: %d %v", code, m)
	}
	code, m := ask("zed", 1)
	st := status(m)
	fs := st["fair_share"].(map[string]any)
	if code != http.StatusTooManyRequests || fs["refused"] != true || st["tokens_remaining"] != 3.0 || st["retry_after_ms"] != 300.0 {
		t.Fatalf("zed's share: %d %v", code, m)
	}
	// acme (weight 3 of 4): a token is 1/7.5 s; it takes the rest.
	for i := range 3 {
		if code, m := ask("acme", 1); code != http.StatusOK {
			t.Fatalf("acme's take %d: %d %v", i, code, m)
		}
	}
	if code, m := ask("acme", 1); code != http.StatusTooManyRequests || status(m)["fair_share"].(map[string]any)["refused"] != nil {
		t.Fatalf("acme on an empty bucket (the bucket's refusal, not the share's): %d %v", code, m)
	}
}
