package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tracing"
)

// With a Tracer, /v1/check and /v1/settle are spans under the request's
// traceparent, with the decision's attributes and a booked wait as an
// event; without one nothing is traced.
func TestServerTracesChecks(t *testing.T) {
	p, err := policy.Parse([]byte("limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 1\n    refill_per_second: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(p, memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var rec tracing.Recorder
	s, err := server.New(server.Config{Limiter: lim, Tracer: &rec})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	post := func(path, body string) map[string]any {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("traceparent", tp)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		json.NewDecoder(res.Body).Decode(&out)
		return out
	}
	post("/v1/check", `{"descriptors": {"tenant": "a"}}`)
	ans := post("/v1/check", `{"descriptors": {"tenant": "a"}, "max_wait_ms": 1000}`) // waits ~50 ms
	post("/v1/check", `{"descriptors": {"tenant": "a"}}`)                             // refused
	post("/v1/settle", `{"lease": "`+ans["lease"].(string)+`", "actual_cost": 1}`)
	checks := rec.Named("POST /v1/check")
	if len(checks) != 3 {
		t.Fatalf("%d check spans", len(checks))
	}
	for _, c := range checks {
		if c.TraceID != tp[3:35] || c.Parent != tp[36:52] || c.Kind != tracing.Server {
			t.Fatalf("check span %+v", c)
		}
	}
	if checks[1].Attr("sluice.decision") != "allowed" || checks[1].Attr("sluice.max_wait_ms") != int64(1000) ||
		len(checks[1].Events) != 1 || checks[1].Events[0].Name != "sluice.wait" || checks[1].Events[0].Attrs["sluice.wait_ms"].(int64) < 1 {
		t.Fatalf("the waiting check: %+v", checks[1])
	}
	r := checks[2]
	if r.Attr("sluice.decision") != "refused" || r.Attr("http.response.status_code") != int64(429) ||
		strings.Join(r.Attr("sluice.refused_by").([]string), ",") != "tenant_api" || strings.Join(r.Attr("sluice.keys").([]string), ",") != "tenant:a" {
		t.Fatalf("the refused check: %+v", r.Attrs)
	}
	if st := rec.Named("POST /v1/settle"); len(st) != 1 || st[0].Attr("http.response.status_code") != int64(200) || st[0].Parent != tp[36:52] {
		t.Fatalf("settle spans %+v", st)
	}
}
