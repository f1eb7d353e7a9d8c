// Tests of the penalty box in the service's answers: /v1/policy's
// block_for, and a check's status with block_for and "blocked".
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
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

const blockSrc = `
limits:
  - name: login
    key: "u:{user}"
    capacity: 1
    refill_per_second: 1
    block_for: 10m
  - name: api
    key: "t:{tenant}"
    capacity: 5
    refill_per_second: 1
`

func blockServer(t *testing.T, opts ...limiter.Option) *httptest.Server {
	t.Helper()
	p, err := policy.Parse([]byte(blockSrc))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, memstore.New(), append(opts, limiter.WithRegisterer(prometheus.NewRegistry()))...)
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

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestBlockForShown(t *testing.T) {
	ts := blockServer(t)
	var pol struct {
		Limits []struct {
			Name     string `json:"name"`
			BlockFor string `json:"block_for"`
		} `json:"limits"`
	}
	if err := json.Unmarshal([]byte(getBody(t, ts.URL+"/v1/policy")), &pol); err != nil {
		t.Fatal(err)
	}
	if len(pol.Limits) != 2 || pol.Limits[0].BlockFor != "10m0s" || pol.Limits[1].BlockFor != "" {
		t.Fatalf("/v1/policy: block_for of login only: %+v", pol)
	}
	var bodies []string
	for range 2 {
		resp, err := http.Post(ts.URL+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {"user": "eve"}}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, string(b))
	}
	if !strings.Contains(bodies[0], `"block_for":"10m0s"`) || strings.Contains(bodies[0], `"blocked"`) {
		t.Fatalf("admitted: block_for, not blocked: %s", bodies[0])
	}
	if !strings.Contains(bodies[1], `"block_for":"10m0s"`) || !strings.Contains(bodies[1], `"blocked":true`) {
		t.Fatalf("refused: blocked: %s", bodies[1])
	}
	// Under --shadow nothing blocks: no block_for.
	pol.Limits = nil
	if err := json.Unmarshal([]byte(getBody(t, blockServer(t, limiter.WithShadow()).URL+"/v1/policy")), &pol); err != nil {
		t.Fatal(err)
	}
	if len(pol.Limits) != 2 || pol.Limits[0].BlockFor != "" {
		t.Fatalf("/v1/policy under --shadow: %+v", pol)
	}
}
