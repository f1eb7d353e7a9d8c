package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

const src = `
limits:
  - name: global
    key: "global"
    capacity: 1000
    refill_per_second: 1
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 3
    refill_per_second: 0.5
  - name: tools
    key: "api_key:{api_key}"
    max_in_flight: 1
    lease_ttl: 30s
costs:
  - when: {route: "/search"}
    cost: 2
`

func newServer(t *testing.T, mutate func(*server.Config)) *httptest.Server {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen: exact figures
	l, err := limiter.New(p, memstore.New(memstore.WithClock(clock)), limiter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Limiter: l, Gatherer: reg, Registerer: reg}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler()) // a real listener on loopback
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, ts *httptest.Server, path, body string, hdr ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return resp, m
}

func TestCheckAdmitsThenRefusesWithHeaders(t *testing.T) {
	ts := newServer(t, nil)
	body := `{"descriptors": {"tenant": "acme"}, "cost": 1}`
	for i := range 3 {
		resp, m := post(t, ts, "/v1/check", body)
		if resp.StatusCode != 200 || m["allowed"] != true {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, m)
		}
	}
	resp, m := post(t, ts, "/v1/check", body)
	if resp.StatusCode != 429 || m["allowed"] != false || m["retry_after_ms"] != 2000.0 {
		t.Fatalf("fourth: %d %v", resp.StatusCode, m)
	}
	if got := resp.Header.Get("Retry-After"); got != "2" {
		t.Fatalf("Retry-After %q", got)
	}
	if got := resp.Header.Get("RateLimit"); got != `"tenant_api";r=0;t=2` {
		t.Fatalf("RateLimit %q", got)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"tenant_api";q=3;w=6` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	limits := m["limits"].([]any)
	ten := limits[1].(map[string]any)
	for k, want := range map[string]any{"name": "tenant_api", "key": "tenant:acme", "capacity": 3.0, "refill_per_second": 0.5,
		"tokens_remaining": 0.0, "token_cost": 1.0, "allowed": false, "retry_after_ms": 2000.0, "reset_after_ms": 6000.0} {
		if ten[k] != want {
			t.Errorf("%s = %v, want %v", k, ten[k], want)
		}
	}
	// The refusal took nothing from global (all or nothing).
	_, m = post(t, ts, "/v1/check", `{"descriptors": {}, "cost": 0}`)
	if g := m["limits"].([]any)[0].(map[string]any); g["tokens_remaining"] != 997.0 {
		t.Fatalf("global %v", g)
	}
}

func TestPolicyCostAndPeek(t *testing.T) {
	ts := newServer(t, nil)
	_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "t", "route": "/search"}}`)
	if ten := m["limits"].([]any)[1].(map[string]any); ten["token_cost"] != 2.0 || ten["tokens_remaining"] != 1.0 {
		t.Fatalf("policy cost: %v", ten)
	}
	for range 3 {
		_, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "t"}, "cost": 0}`)
	}
	if ten := m["limits"].([]any)[1].(map[string]any); ten["tokens_remaining"] != 1.0 {
		t.Fatalf("peeks consumed: %v", ten)
	}
}

func TestBadInput(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxBodyBytes = 256 })
	for body, want := range map[string][2]string{
		`{"descriptors": {"tenant": "a"}`:                            {"400", "bad_json"},
		`{"descriptors": {"tenant": "a"}, "colour": 1}`:              {"400", "bad_json"},
		`{"descriptors": {"tenant": "a"}} {}`:                        {"400", "bad_json"},
		`{"cost": 1}`:                                                {"400", "bad_request"},
		`{"descriptors": {"tenant": "a"}, "cost": -1}`:               {"400", "bad_request"},
		`{"descriptors": {"tenant": "a"}, "max_wait_ms": -5}`:        {"400", "bad_request"},
		`{"descriptors": {"tenant": "a"}, "cost": "3"}`:              {"400", "bad_json"},
		`{"descriptors": {"tenant": "a"}, "cost": 4}`:                {"422", "cost_exceeds_capacity"},
		`{"descriptors": {"x": "` + strings.Repeat("y", 300) + `"}}`: {"413", "body_too_large"},
		`[]`: {"400", "bad_json"},
		``:   {"400", "bad_json"},
	} {
		resp, m := post(t, ts, "/v1/check", body)
		if got := resp.Status[:3]; got != want[0] || m["code"] != want[1] || m["error"] == "" {
			t.Errorf("%.50q: %s %v, want %v", body, resp.Status, m, want)
		}
		if want[1] == "cost_exceeds_capacity" && m["limit"] != "tenant_api" {
			t.Errorf("the cost error must name the limit: %v", m)
		}
	}
	// Nothing was taken by any of them.
	_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "a"}, "cost": 0}`)
	if ten := m["limits"].([]any)[1].(map[string]any); ten["tokens_remaining"] != 3.0 {
		t.Fatalf("bad requests consumed: %v", ten)
	}
}

// A retried request with the same request_id is not charged twice, even
// when the retries race.
func TestRequestIDIdempotent(t *testing.T) {
	ts := newServer(t, nil)
	body := `{"descriptors": {"tenant": "idem"}, "cost": 2, "request_id": "r-1"}`
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, m := post(t, ts, "/v1/check", body); resp.StatusCode != 200 || m["allowed"] != true {
				t.Errorf("%d %v", resp.StatusCode, m)
			}
		}()
	}
	wg.Wait()
	_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "idem"}, "cost": 0}`)
	if ten := m["limits"].([]any)[1].(map[string]any); ten["tokens_remaining"] != 1.0 {
		t.Fatalf("charged more than once: %v", ten)
	}
	if resp, _ := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "idem"}, "cost": 2, "request_id": "r-2"}`); resp.StatusCode != 429 {
		t.Fatalf("a new request_id is a new request: %d", resp.StatusCode)
	}
}

func TestLeasesAndRelease(t *testing.T) {
	ts := newServer(t, nil)
	resp, m := post(t, ts, "/v1/check", `{"descriptors": {"api_key": "k"}}`)
	lease, _ := m["lease"].(string)
	if resp.StatusCode != 200 || lease == "" {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
	if resp, _ := post(t, ts, "/v1/check", `{"descriptors": {"api_key": "k"}}`); resp.StatusCode != 429 {
		t.Fatalf("second in flight: %d", resp.StatusCode)
	}
	if resp, m := post(t, ts, "/v1/release", `{"lease": "`+lease+`"}`); resp.StatusCode != 200 || m["released"] != true {
		t.Fatalf("release: %d %v", resp.StatusCode, m)
	}
	if resp, _ := post(t, ts, "/v1/check", `{"descriptors": {"api_key": "k"}}`); resp.StatusCode != 200 {
		t.Fatalf("after release: %d", resp.StatusCode)
	}
	for bad, want := range map[string]int{`{"lease": "!!"}`: 404, `{"lease": ""}`: 400, `{"lease": "e30"}`: 404, `{"leas": "x"}`: 400} {
		if resp, m := post(t, ts, "/v1/release", bad); resp.StatusCode != want {
			t.Errorf("%s: %d %v", bad, resp.StatusCode, m)
		}
	}
}

func TestAuthAndOpenEndpoints(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.AuthToken = "s3cret" })
	if resp, m := post(t, ts, "/v1/check", `{"descriptors": {}}`); resp.StatusCode != 401 || m["code"] != "unauthorized" {
		t.Fatalf("no token: %d %v", resp.StatusCode, m)
	}
	if resp, _ := post(t, ts, "/v1/check", `{"descriptors": {}}`, "Authorization", "Bearer wrong"); resp.StatusCode != 401 {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}
	if resp, _ := post(t, ts, "/v1/check", `{"descriptors": {}}`, "Authorization", "Bearer s3cret"); resp.StatusCode != 200 {
		t.Fatalf("right token: %d", resp.StatusCode)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "sluice_decisions_total"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %d %.100q", path, resp.StatusCode, b)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/policy", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var pol struct {
		Version string
		Limits  []struct{ Name, Algorithm string }
	}
	json.NewDecoder(resp.Body).Decode(&pol)
	resp.Body.Close()
	if len(pol.Version) != 16 || len(pol.Limits) != 3 || pol.Limits[2].Algorithm != "concurrency" {
		t.Fatalf("policy %+v", pol)
	}
}

func FuzzCheckRequest(f *testing.F) {
	f.Add([]byte(`{"descriptors": {"tenant": "a"}, "cost": 3, "max_wait_ms": 0, "retry": false, "request_id": "x"}`))
	f.Add([]byte(`{"descriptors": null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req server.CheckRequest
		if err := server.DecodeStrict(b, &req); err != nil {
			return
		}
		if req.Validate() == nil {
			if req.Descriptors == nil || (req.Cost != nil && *req.Cost < 0) || req.MaxWaitMS < 0 {
				t.Fatalf("invalid request accepted: %+v", req)
			}
		}
		var sr server.SettleRequest
		server.DecodeStrict(b, &sr)
	})
}

// Reserve then settle over HTTP: check with an estimate, settle the actual.
func TestSettle(t *testing.T) {
	ts := newServer(t, nil)
	_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 3}`)
	lease, _ := m["lease"].(string)
	if m["allowed"] != true || lease == "" {
		t.Fatalf("%v", m)
	}
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": 1}`); resp.StatusCode != 200 || m["settled"] != true {
		t.Fatalf("settle: %d %v", resp.StatusCode, m)
	}
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 0}`)
	if ten := m["limits"].([]any)[1].(map[string]any); ten["tokens_remaining"] != 2.0 {
		t.Fatalf("after settling 3 -> 1: %v", ten)
	}
	for body, want := range map[string][2]string{
		`{"lease": "` + lease + `", "actual_cost": 1}`:  {"409", "already_settled"},
		`{"lease": "nope", "actual_cost": 1}`:           {"404", "unknown_lease"},
		`{"lease": "` + lease + `", "actual_cost": -1}`: {"400", "bad_request"},
		`{"lease": "` + lease + `"}`:                    {"400", "bad_request"},
		`{"actual_cost": 1}`:                            {"400", "bad_request"},
		`{"lease": "x", "actual_cost": 1, "extra": 1}`:  {"400", "bad_json"},
	} {
		if resp, m := post(t, ts, "/v1/settle", body); resp.Status[:3] != want[0] || m["code"] != want[1] {
			t.Errorf("%s: %s %v, want %v", body, resp.Status, m, want)
		}
	}
}

// Per-limit costs over HTTP: "costs" on /v1/check, "actual_costs" on
// /v1/settle; a name that is no applicable limit is 400 unknown_limit, a
// cost above a limit's capacity 422 naming it; nothing is taken either way.
func TestPerLimitCostsHTTP(t *testing.T) {
	ts := newServer(t, nil)
	_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 1, "costs": {"global": 400}}`)
	lease, _ := m["lease"].(string)
	if m["allowed"] != true || lease == "" {
		t.Fatalf("%v", m)
	}
	lim := func(m map[string]any, i int) map[string]any { return m["limits"].([]any)[i].(map[string]any) }
	if g, ten := lim(m, 0), lim(m, 1); g["token_cost"] != 400.0 || g["tokens_remaining"] != 600.0 || ten["token_cost"] != 1.0 || ten["tokens_remaining"] != 2.0 {
		t.Fatalf("costs: %v", m)
	}
	for body, want := range map[string][3]string{
		`{"descriptors": {"tenant": "llm"}, "costs": {"tpm": 1}}`:       {"400", "unknown_limit", "tpm"},
		`{"descriptors": {"tenant": "llm"}, "costs": {"tools": 1}}`:     {"400", "unknown_limit", "tools"}, // not applicable: no api_key
		`{"descriptors": {"tenant": "llm"}, "costs": {"global": 1001}}`: {"422", "cost_exceeds_capacity", "global"},
		`{"descriptors": {"tenant": "llm"}, "costs": {"global": -2}}`:   {"400", "bad_request", ""},
		`{"descriptors": {"tenant": "llm"}, "costs": {"global": "x"}}`:  {"400", "bad_json", ""},
	} {
		resp, m := post(t, ts, "/v1/check", body)
		if resp.Status[:3] != want[0] || m["code"] != want[1] || (want[2] != "" && m["limit"] != want[2]) {
			t.Errorf("%s: %s %v, want %v", body, resp.Status, m, want)
		}
	}
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 0}`)
	if g := lim(m, 0); g["tokens_remaining"] != 600.0 {
		t.Fatalf("refused checks took from global: %v", g)
	}
	// unknown names and negative costs at settle change nothing and leave
	// the lease to settle
	for body, want := range map[string][2]string{
		`{"lease": "` + lease + `", "actual_costs": {"tpm": 1}}`:     {"400", "unknown_limit"},
		`{"lease": "` + lease + `", "actual_costs": {"global": -1}}`: {"400", "bad_request"},
	} {
		if resp, m := post(t, ts, "/v1/settle", body); resp.Status[:3] != want[0] || m["code"] != want[1] {
			t.Errorf("%s: %s %v, want %v", body, resp.Status, m, want)
		}
	}
	// global settles to 350, tenant_api (not named, no actual_cost) keeps 1
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_costs": {"global": 350}}`); resp.StatusCode != 200 || m["settled"] != true {
		t.Fatalf("settle: %d %v", resp.StatusCode, m)
	}
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 0}`)
	if g, ten := lim(m, 0), lim(m, 1); g["tokens_remaining"] != 650.0 || ten["tokens_remaining"] != 2.0 {
		t.Fatalf("after settling global to 350: %v %v", g, ten)
	}
	// actual_cost for the others with actual_costs for the named
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 2, "costs": {"global": 10}}`)
	lease = m["lease"].(string)
	if resp, _ := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": 0, "actual_costs": {"global": 20}}`); resp.StatusCode != 200 {
		t.Fatalf("settle: %d", resp.StatusCode)
	}
	_, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "llm"}, "cost": 0}`)
	if g, ten := lim(m, 0), lim(m, 1); g["tokens_remaining"] != 630.0 || ten["tokens_remaining"] != 2.0 {
		t.Fatalf("after settling global to 20 and tenant_api to 0: %v %v", g, ten)
	}
}

// "reserve": true books without holding the request: 200 at once with
// wait_ms and a lease, 429 (nothing booked) when the turn is beyond
// max_wait_ms; settling the lease with actual_cost 0 returns the booking.
func TestReserveHTTP(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxWait = time.Minute })
	if _, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "r"}, "cost": 3}`); m["allowed"] != true {
		t.Fatalf("%v", m)
	}
	resp, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "r"}, "cost": 1, "max_wait_ms": 5000, "reserve": true}`)
	lease, _ := m["lease"].(string)
	if resp.StatusCode != 200 || m["allowed"] != true || m["wait_ms"] != 2000.0 || lease == "" {
		t.Fatalf("reserve: %d %v", resp.StatusCode, m)
	}
	resp, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "r"}, "cost": 2, "max_wait_ms": 3000, "reserve": true}`)
	if resp.StatusCode != 429 || m["allowed"] != false || m["wait_ms"] != nil {
		t.Fatalf("a turn beyond max_wait_ms: %d %v", resp.StatusCode, m)
	}
	resp, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "r"}, "cost": 1, "max_wait_ms": 5000, "reserve": true}`)
	if resp.StatusCode != 200 || m["wait_ms"] != 4000.0 {
		t.Fatalf("the next in line waits behind the first (4 s; the refused one booked nothing): %d %v", resp.StatusCode, m)
	}
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": 0}`); resp.StatusCode != 200 {
		t.Fatalf("cancel: %d %v", resp.StatusCode, m)
	}
	// the first booking's token is back: a new one waits as the second
	// one alone would leave it (4 s), not behind both (6 s)
	if _, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "r"}, "cost": 1, "max_wait_ms": 10000, "reserve": true}`); m["wait_ms"] != 4000.0 {
		t.Fatalf("after the cancel: %v", m)
	}
	// a plain check answers no wait_ms
	if _, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "other"}}`); m["wait_ms"] != nil {
		t.Fatalf("wait_ms on a plain check: %v", m)
	}
	if _, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "other2"}, "max_wait_ms": 100, "reserve": true}`); m["wait_ms"] != 0.0 {
		t.Fatalf("a reserve admitted at once says wait_ms 0: %v", m)
	}
}

// POST /v1/pause: a retry hint reported by one caller delays every check
// of those buckets until it passes.
func TestPauseHTTP(t *testing.T) {
	ts := newServer(t, nil)
	before := time.Now()
	resp, m := post(t, ts, "/v1/pause", `{"descriptors": {"tenant": "p"}, "retry_after_ms": 4000, "limits": ["tenant_api"]}`)
	until, _ := m["paused_until_ms"].(float64)
	if resp.StatusCode != 200 || int64(until) < before.Add(4*time.Second).UnixMilli() || int64(until) > time.Now().Add(4*time.Second).UnixMilli() {
		t.Fatalf("pause: %d %v", resp.StatusCode, m)
	}
	resp, m = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "p"}}`)
	if resp.StatusCode != 429 || m["retry_after_ms"] != 6000.0 || resp.Header.Get("Retry-After") != "6" {
		t.Fatalf("paused check (4 s pause, then 2 s per token): %d %v", resp.StatusCode, m)
	}
	if _, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "other"}}`); m["allowed"] != true {
		t.Fatalf("another tenant is not paused: %v", m)
	}
	for body, want := range map[string][2]string{
		`{"descriptors": {"tenant": "p"}, "retry_after_ms": 0}`:                        {"400", "bad_request"},
		`{"descriptors": {"tenant": "p"}, "retry_after_ms": 86400001}`:                 {"400", "bad_request"},
		`{"descriptors": {"tenant": "p"}, "retry_after_ms": 10, "limits": ["tpm"]}`:    {"400", "unknown_limit"},
		`{"descriptors": {"api_key": "k"}, "retry_after_ms": 10, "limits": ["tools"]}`: {"400", "bad_request"},
		`{"retry_after_ms": 10}`:                                               {"400", "bad_request"},
		`{"descriptors": {"tenant": "p"}, "retry_after_ms": "soon"}`:           {"400", "bad_json"},
		`{"descriptors": {"tenant": "x"}, "retry_after_ms": 10, "limits": []}`: {"400", "bad_request"}, // (not "every limit")
	} {
		if resp, m := post(t, ts, "/v1/pause", body); resp.Status[:3] != want[0] || m["code"] != want[1] {
			t.Errorf("%s: %s %v, want %v", body, resp.Status, m, want)
		}
	}
}

// A held request (max_wait_ms) whose caller goes away before its turn has
// its booking returned: the next booking waits as if it had never been.
func TestHeldBookingReturnedWhenTheCallerLeaves(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxWait = time.Minute; c.MaxWaiting = 10 })
	post(t, ts, "/v1/check", `{"descriptors": {"tenant": "h"}, "cost": 3}`) // empty (frozen clock)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/check", strings.NewReader(`{"descriptors": {"tenant": "h"}, "max_wait_ms": 30000}`))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the held request answered before its turn (2 s on a frozen clock)")
	}
	// the server notices the caller left and returns the booking
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "h"}, "cost": 1, "max_wait_ms": 60000, "reserve": true}`)
		if m["wait_ms"] == 2000.0 {
			break // the left booking's token is back: this one is first in line
		}
		if time.Now().After(deadline) {
			t.Fatalf("the booking of the caller that left was not returned: %v", m)
		}
		// not yet returned: give this reservation back and look again
		if lease, _ := m["lease"].(string); lease != "" {
			post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": 0}`)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A check with max_wait_ms beyond --max-waiting held checks is decided at
// once, and counted: sluice_waiting_full_total tells a full waiting room
// from a plain refusal.
func TestWaitingFullCounted(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxWait = time.Minute; c.MaxWaiting = 1 })
	post(t, ts, "/v1/check", `{"descriptors": {"tenant": "f"}, "cost": 3}`) // empty (frozen clock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/check", strings.NewReader(`{"descriptors": {"tenant": "f"}, "max_wait_ms": 30000}`))
	go http.DefaultClient.Do(req) // held: the one place
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, metrics := get(t, ts.URL+"/metrics")
		if strings.Contains(metrics, "sluice_waits_total{limit=\"tenant_api\"} 1") {
			break // (booked, so held)
		}
		if time.Now().After(deadline) {
			t.Fatal("the first check was not held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if res, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "f"}, "max_wait_ms": 30000}`); res.StatusCode != 429 || time.Since(start) > 2*time.Second {
		t.Fatalf("the second, beyond --max-waiting 1: %d %v after %v, want 429 at once", res.StatusCode, m, time.Since(start))
	}
	if _, metrics := get(t, ts.URL+"/metrics"); !strings.Contains(metrics, "sluice_waiting_full_total 1") {
		t.Fatalf("sluice_waiting_full_total is not 1:\n%s", metrics)
	}
}

// A held request whose caller leaves keeps nothing under its request_id:
// the refusal its cancel made reached nobody, so the retry (the reason
// for a request_id) is decided anew, not answered with that refusal.
func TestHeldRequestIDForgottenWhenTheCallerLeaves(t *testing.T) {
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	ts := newServer(t, func(c *server.Config) {
		p, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		if c.Limiter, err = limiter.New(p, memstore.New(memstore.WithClock(clock)), limiter.WithRegisterer(reg)); err != nil {
			t.Fatal(err)
		}
		c.Gatherer, c.Registerer, c.MaxWait, c.MaxWaiting = reg, reg, time.Minute, 10
	})
	post(t, ts, "/v1/check", `{"descriptors": {"tenant": "r"}, "cost": 3}`) // empty
	held := `{"descriptors": {"tenant": "r"}, "max_wait_ms": 30000, "request_id": "rid-1"}`
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/check", strings.NewReader(held))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the held request answered before its turn (2 s on a frozen clock)")
	}
	// once the server has seen the caller leave (its booking returned), a
	// retry after the bucket refilled is admitted
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "r"}, "cost": 1, "max_wait_ms": 60000, "reserve": true}`)
		lease, _ := m["lease"].(string)
		post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": 0}`)
		if m["wait_ms"] == 2000.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the booking of the caller that left was not returned: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	clock.Advance(10 * time.Second)
	if res, m := post(t, ts, "/v1/check", held); res.StatusCode != 200 || m["allowed"] != true {
		t.Fatalf("rule: the retry of a held request whose caller left is decided anew: %d %v", res.StatusCode, m)
	}
}

// A cost that is not a whole number (null, a fraction, a string) is a
// malformed body, never a free request.
func TestCostsMustBeWholeNumbers(t *testing.T) {
	ts := newServer(t, nil)
	for _, body := range []string{
		`{"descriptors":{"tenant":"a"},"costs":{"tenant_api":null}}`,
		`{"descriptors":{"tenant":"a"},"costs":{"tenant_api":1.5}}`,
		`{"descriptors":{"tenant":"a"},"costs":{"tenant_api":"2"}}`,
	} {
		if res, ans := post(t, ts, "/v1/check", body); res.StatusCode != 400 || ans["code"] != "bad_json" {
			t.Errorf("%s: %d %v", body, res.StatusCode, ans)
		}
	}
	if res, ans := post(t, ts, "/v1/settle", `{"lease":"x","actual_costs":{"tenant_api":null}}`); res.StatusCode != 400 || ans["code"] != "bad_json" {
		t.Errorf("settle with a null cost: %d %v", res.StatusCode, ans)
	}
}
