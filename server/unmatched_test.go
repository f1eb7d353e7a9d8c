// Tests of checks no limit applies to: 422 no_limit_applies unless the
// policy says allow_unmatched: true; forward-auth admits them.
package server_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

const unmatchedSrc = `
request_descriptors:
  route: {from: path, prefixes: [/export]}
limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 3
    refill_per_second: 1
  - name: exports
    key: "export:{route}"
    when: {route: /export}
    capacity: 1
    refill_per_second: 0.001
`

func unmatchedServer(t *testing.T, src string) *httptest.Server {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, memstore.New(), limiter.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Limiter: l, Gatherer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func TestNoLimitApplies(t *testing.T) {
	ts := unmatchedServer(t, unmatchedSrc)
	const needs = `: limit "tenant_api" (key "tenant:{tenant}") needs tenant; limit "exports" (key "export:{route}") needs route=/export (a policy with allow_unmatched: true admits such requests unlimited)`
	for body, want := range map[string]string{
		`{"descriptors": {"tennant": "acme"}}`:                                     `no limit applies to the descriptors tennant (did you mean tenant?)` + needs,
		`{"descriptors": {}}`:                                                      `no limit applies to a request with no descriptors` + needs,
		`{"descriptors": {"user": "u1", "route": "/x"}, "cost": 0}`:                `no limit applies to the descriptors route, user` + `: limit "tenant_api" (key "tenant:{tenant}") needs tenant; limit "exports" (key "export:{route}") needs route=/export (a policy with allow_unmatched: true admits such requests unlimited)`,
		`{"descriptors": {"tennant": "acme"}, "request_id": "r1"}`:                 `no limit applies to the descriptors tennant (did you mean tenant?)` + needs,
		`{"descriptors": {"tennant": "acme"}, "max_wait_ms": 50, "reserve": true}`: `no limit applies to the descriptors tennant (did you mean tenant?)` + needs,
	} {
		res, m := post(t, ts, "/v1/check", body)
		if res.StatusCode != http.StatusUnprocessableEntity || m["code"] != "no_limit_applies" || m["error"] != want {
			t.Errorf("%s: %d %v\nwant 422 no_limit_applies %q", body, res.StatusCode, m, want)
		}
	}
	// A 422 is not kept for the request_id: with a matching request the id
	// would mismatch if it were; and a check a limit applies to is decided.
	if res, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "acme"}}`); res.StatusCode != 200 {
		t.Fatalf("a matching check: %d %v", res.StatusCode, m)
	}
	// Forward-auth reads its descriptors from the policy's own
	// request_descriptors: a request no limit applies to (a path outside
	// /export) is admitted, whatever allow_unmatched says.
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/auth", nil)
		req.Header.Set("X-Forwarded-Uri", "/home")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("forward-auth of an unlimited path: %d, want 200", res.StatusCode)
		}
	}

	// allow_unmatched: true admits them, with no limits.
	ts = unmatchedServer(t, unmatchedSrc+"allow_unmatched: true\n")
	for _, body := range []string{`{"descriptors": {"tennant": "acme"}}`, `{"descriptors": {}}`} {
		res, m := post(t, ts, "/v1/check", body)
		if res.StatusCode != 200 || m["allowed"] != true || len(m["limits"].([]any)) != 0 {
			t.Errorf("allow_unmatched: %s: %d %v", body, res.StatusCode, m)
		}
	}
}
