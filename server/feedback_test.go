// Tests of POST /v1/feedback: two instances on one store share a key's
// adaptive ceiling.

package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

const adaptiveSrc = `limits:
  - name: llm
    key: "key:{api_key}"
    capacity: 10
    refill_per_second: 100
    adaptive: {min_refill_per_second: 10, decrease: 0.5}
`

func adaptiveServer(t *testing.T, st store.Store) *httptest.Server {
	t.Helper()
	p, err := policy.Parse([]byte(adaptiveSrc))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l, err := limiter.New(p, st, limiter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Limiter: l, Gatherer: reg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func TestFeedback(t *testing.T) {
	st := memstore.New()
	a, b := adaptiveServer(t, st), adaptiveServer(t, st)
	resp, m := post(t, a, "/v1/feedback", `{"descriptors": {"api_key": "k"}, "outcome": "overloaded"}`)
	lim, _ := m["limits"].([]any)
	if resp.StatusCode != 200 || len(lim) != 1 {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
	if f := lim[0].(map[string]any); f["lowered"] != true || f["adaptive_refill_per_second"].(float64) != 50 || f["name"] != "llm" {
		t.Fatalf("an overload halves the ceiling: %v", f)
	}
	_, m = post(t, b, "/v1/feedback", `{"descriptors": {"api_key": "k"}, "outcome": "overloaded", "limits": ["llm"]}`)
	if f := m["limits"].([]any)[0].(map[string]any); f["lowered"] != false || f["adaptive_refill_per_second"].(float64) < 50 {
		t.Fatalf("the other instance's overload within the cooldown: %v", f)
	}
	post(t, b, "/v1/check", `{"descriptors": {"api_key": "k"}}`) // (reads the ceiling)
	_, m = post(t, b, "/v1/check", `{"descriptors": {"api_key": "k"}}`)
	st0 := m["limits"].([]any)[0].(map[string]any)
	if r, _ := st0["adaptive_refill_per_second"].(float64); r < 50 || r > 51 {
		t.Fatalf("the other instance's status shows the ceiling: %v", st0)
	}
	{
		_, body := get(t, b.URL+"/v1/stats")
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err)
		}
		l0 := m["limits"].([]any)[0].(map[string]any)
		if r, _ := l0["adaptive_refill_per_second"].(float64); r < 50 || r > 51 {
			t.Fatalf("/v1/stats shows the ceiling: %v", l0)
		}
	}
	for _, tc := range []struct{ body, code string }{
		{`{"descriptors": {"api_key": "k"}, "outcome": "slow"}`, "bad_request"},
		{`{"descriptors": {"api_key": "k"}, "outcome": "ok", "limits": ["nope"]}`, "unknown_limit"},
		{`{"outcome": "ok"}`, "bad_request"},
	} {
		resp, m := post(t, a, "/v1/feedback", tc.body)
		if resp.StatusCode/100 != 4 || m["code"] != tc.code {
			t.Errorf("%s: %d %v", tc.body, resp.StatusCode, m)
		}
	}
	if resp, _ := post(t, a, "/v1/feedback", `{"descriptors": {"other": "x"}, "outcome": "ok"}`); resp.StatusCode != 200 {
		t.Errorf("no adaptive limit applies: 200 with none: %d", resp.StatusCode)
	}
}

// A feedback that lowers a key's ceiling is an audit record
// (adaptive_ceiling); one within the cooldown, which changes nothing, is
// not.
func TestFeedbackAudited(t *testing.T) {
	ts := adaptiveServer(t, memstore.New())
	post(t, ts, "/v1/feedback", `{"descriptors": {"api_key": "k"}, "outcome": "overloaded"}`)
	post(t, ts, "/v1/feedback", `{"descriptors": {"api_key": "k"}, "outcome": "overloaded"}`) // (within the cooldown)
	post(t, ts, "/v1/feedback", `{"descriptors": {"api_key": "k"}, "outcome": "ok"}`)
	resp, body := get(t, ts.URL+"/v1/audit")
	var d map[string]any
	if err := json.Unmarshal([]byte(body), &d); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/audit: %d %s %v", resp.StatusCode, body, err)
	}
	recs, _ := d["records"].([]any)
	if len(recs) != 1 {
		t.Fatalf("/v1/audit: %v, want one record", d)
	}
	r := recs[0].(map[string]any)
	ch, _ := r["change"].(map[string]any)
	if r["action"] != "adaptive_ceiling" || r["actor"] != server.ActorAnonymous || ch["limit"] != "llm" ||
		ch["adaptive_refill_per_second"] != 50.0 || ch["descriptors"].(map[string]any)["api_key"] != "k" {
		t.Fatalf("the ceiling's record %v", r)
	}
}
