package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

const spendPolicy = `
prices:
  gpt-4o: {input: 2.50, output: 10.00, cached_input: 1.25}
limits:
  - name: rpm
    key: "team:{team}"
    capacity: 100
    refill: 100/m
  - name: tpm
    key: "team:{team}"
    capacity: 1000000
    refill: 1000000/m
    unit: tokens
  - name: budget
    key: "team:{team}"
    algorithm: quota
    period: month
    limit: 0.45
    unit: usd
`

func spendStatus(m map[string]any, name string) map[string]any {
	ls, _ := m["limits"].([]any)
	for _, x := range ls {
		if st, _ := x.(map[string]any); st["name"] == name {
			return st
		}
	}
	return nil
}

// /v1/check's usage_estimate reserves spend on the usd limit and tokens on
// the token limit; /v1/settle's usage settles both exactly; /v1/stats
// shows the spend; an unknown model is 422 unknown_model.
func TestServeSpend(t *testing.T) {
	p, err := policy.Parse([]byte(spendPolicy))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, memstore.New(memstore.WithClock(sluice.NewManualClock(time.Unix(1_800_000_000, 0)))))
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, func(c *server.Config) { c.Limiter = l })
	est := `"usage_estimate": {"model": "gpt-4o", "input_tokens": 20000, "max_output_tokens": 5000}`
	resp, m := post(t, ts, "/v1/check", `{"descriptors": {"team": "a"}, `+est+`}`)
	if resp.StatusCode != 200 || spendStatus(m, "budget")["token_cost"] != 100000.0 || spendStatus(m, "tpm")["token_cost"] != 25000.0 || spendStatus(m, "rpm")["token_cost"] != 1.0 {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
	lease := m["lease"].(string)
	resp, m = post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "usage": {"model": "gpt-4o", "input_tokens": 20000, "cached_input_tokens": 10000, "output_tokens": 1000}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("settle: %d %v", resp.StatusCode, m)
	}
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"team": "a"}, "cost": 0}`)
	if got := spendStatus(m, "budget")["tokens_remaining"]; got != float64(450000-47500) {
		t.Fatalf("budget remaining %v micro-dollars, want %d", got, 450000-47500)
	}
	if got := spendStatus(m, "tpm")["tokens_remaining"]; got != float64(1000000-21000) {
		t.Fatalf("tpm remaining %v, want %d", got, 1000000-21000)
	}
	// An unknown model, with a usd limit applying.
	resp, m = post(t, ts, "/v1/check", `{"descriptors": {"team": "a"}, "usage_estimate": {"model": "gpt-9", "input_tokens": 1}}`)
	if resp.StatusCode != 422 || m["code"] != "unknown_model" || m["limit"] != "budget" {
		t.Fatalf("unknown model: %d %v", resp.StatusCode, m)
	}
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"team": "a"}, `+est+`}`)
	lease = m["lease"].(string)
	resp, m = post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "usage": {"model": "gpt-9", "input_tokens": 1}}`)
	if resp.StatusCode != 422 || m["code"] != "unknown_model" {
		t.Fatalf("unknown model at settle: %d %v", resp.StatusCode, m)
	}
	// Bad usages.
	for _, body := range []string{
		`{"descriptors": {"team": "a"}, "usage_estimate": {"input_tokens": 1}}`,
		`{"descriptors": {"team": "a"}, "usage_estimate": {"model": "gpt-4o", "input_tokens": -1}}`,
	} {
		if resp, m := post(t, ts, "/v1/check", body); resp.StatusCode != 400 || m["code"] != "bad_request" {
			t.Errorf("%s: %d %v", body, resp.StatusCode, m)
		}
	}
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "usage": {"model": "gpt-4o", "input_tokens": 1, "cached_input_tokens": 2}}`); resp.StatusCode != 400 {
		t.Errorf("cached beyond input: %d %v", resp.StatusCode, m)
	}
	// The receipt was not settled by the refusals: settle it at its estimate.
	if resp, m := post(t, ts, "/v1/settle", fmt.Sprintf(`{"lease": %q, "usage": {"model": "gpt-4o", "input_tokens": 20000, "output_tokens": 5000}}`, lease)); resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
	if _, body := get(t, ts.URL+"/v1/policy"); !strings.Contains(body, `"name":"budget","key":"team:{team}","algorithm":"quota"`) || !strings.Contains(body, `"unit":"usd"`) {
		t.Fatalf("/v1/policy: %s", body)
	}
	_, body := get(t, ts.URL+"/v1/stats")
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	for _, x := range st["limits"].([]any) {
		lm := x.(map[string]any)
		if lm["name"] == "budget" && (lm["unit"] != "usd" || lm["spent_micro_usd"] != float64(47500+100000) || lm["spent_usd"] != "0.147500") {
			t.Fatalf("stats: %v", lm)
		}
		if lm["name"] == "tpm" && lm["unit"] != "tokens" {
			t.Fatalf("stats: %v", lm)
		}
	}
}
