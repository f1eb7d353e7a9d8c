// Tests of requests a deny override refuses: 403 denied on /v1/check (with
// the limits' statuses) and forward-auth, and the override marks of
// /v1/top.
package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

const deniedSrc = `
request_descriptors:
  tenant: {from: header, name: X-Tenant}
limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 3
    refill_per_second: 1
`

func deniedServer(t *testing.T) *httptest.Server {
	t.Helper()
	p, err := policy.Parse([]byte(deniedSrc))
	if err != nil {
		t.Fatal(err)
	}
	set := overrides.NewSet(p)
	for _, o := range []overrides.Override{
		{Name: "tenant_api", Match: map[string]string{"tenant": "blocked"}, Params: overrides.Params{Deny: true}},
		{Name: "tenant_api", Match: map[string]string{"tenant": "pro_*"}, Params: overrides.Params{Capacity: 30}},
	} {
		if err := set.Put(&o); err != nil {
			t.Fatal(err)
		}
	}
	keys := server.NewKeys(10)
	l, err := limiter.New(p, memstore.New(), limiter.WithRegisterer(prometheus.NewRegistry()), limiter.WithOverrides(set), limiter.WithKeyObserver(keys))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Limiter: l, Gatherer: prometheus.NewRegistry(), Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func TestDeniedCheck(t *testing.T) {
	ts := deniedServer(t)
	resp, err := http.Post(ts.URL+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {"tenant": "blocked"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		Allowed bool   `json:"allowed"`
		Code    string `json:"code"`
		Limit   string `json:"limit"`
		Limits  []struct {
			Denied   bool `json:"denied"`
			Override *struct {
				Match map[string]string `json:"match"`
			} `json:"override"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden || got.Allowed || got.Code != "denied" || got.Limit != "tenant_api" ||
		len(got.Limits) != 1 || !got.Limits[0].Denied || got.Limits[0].Override == nil || got.Limits[0].Override.Match["tenant"] != "blocked" ||
		resp.Header.Get("Retry-After") != "" {
		t.Fatalf("a denied check: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	// An override of parameters: its limit in the status, and its match.
	resp, err = http.Post(ts.URL+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {"tenant": "pro_acme"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"capacity":30`) || !strings.Contains(string(body), `"override":{"match":{"tenant":"pro_*"}}`) {
		t.Fatalf("an overridden check: %d %s", resp.StatusCode, body)
	}

	// Forward-auth: 403 denied.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/auth", nil)
	req.Header.Set("X-Tenant", "blocked")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"code":"denied"`) {
		t.Fatalf("forward-auth of a denied key: %d %s", resp.StatusCode, body)
	}

	// /v1/top marks the denied key.
	resp, err = http.Get(ts.URL + "/v1/top?limit=tenant_api&by=refused")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"key":"tenant:blocked"`) || !strings.Contains(string(body), `"override":{"match":{"tenant":"blocked"},"denied":true}`) {
		t.Fatalf("/v1/top: %s", body)
	}
}
