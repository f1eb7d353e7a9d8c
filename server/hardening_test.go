package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A max_in_flight lease can be released after many other admitted checks:
// records holding slots are never dropped by the cap on receipts. A
// receipt the cap dropped answers 404 receipt_dropped (not unknown_lease),
// and the drop is counted in sluice_receipts_dropped_total.
func TestLeaseSurvivesTheReceiptCap(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.MaxReceipts = 20 })
	resp, m := post(t, ts, "/v1/check", `{"descriptors": {"api_key": "k1"}}`)
	held, _ := m["lease"].(string)
	if resp.StatusCode != 200 || held == "" {
		t.Fatalf("first check: %d %v", resp.StatusCode, m)
	}
	first := ""
	for i := range 100 {
		resp, m := post(t, ts, "/v1/check", fmt.Sprintf(`{"descriptors": {"user": "u%d"}, "cost": 1}`, i))
		if resp.StatusCode != 200 || m["lease"] == nil {
			t.Fatalf("check %d: %d %v", i, resp.StatusCode, m)
		}
		if i == 0 {
			first = m["lease"].(string)
		}
	}
	if resp, m := post(t, ts, "/v1/release", `{"lease": "`+held+`"}`); resp.StatusCode != 200 || m["released"] != true {
		t.Fatalf("release of a live lease after 100 other checks: %d %v", resp.StatusCode, m)
	}
	// Its slot is free again: the next check on the key is admitted.
	if resp, _ := post(t, ts, "/v1/check", `{"descriptors": {"api_key": "k1"}}`); resp.StatusCode != 200 {
		t.Fatalf("after release: %d", resp.StatusCode)
	}
	resp, m = post(t, ts, "/v1/settle", `{"lease": "`+first+`", "actual_cost": 0}`)
	if resp.StatusCode != 404 || m["code"] != "receipt_dropped" {
		t.Fatalf("settle of a dropped receipt: %d %v", resp.StatusCode, m)
	}
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "actual_cost": 0}`); resp.StatusCode != 404 || m["code"] != "unknown_lease" {
		t.Fatalf("settle of an unknown lease: %d %v", resp.StatusCode, m)
	}
	_, metrics := get(t, ts.URL+"/metrics")
	if !strings.Contains(metrics, "sluice_receipts_dropped_total 82") {
		t.Fatalf("want sluice_receipts_dropped_total 82 (102 receipts, 20 kept) in:\n%s", grepLines(metrics, "receipts"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A request_id is tied to its request: reused by a request with other
// descriptors or cost it answers 422 request_id_mismatch and charges
// nothing; the same request retried (marked retry) gets the first answer.
func TestRequestIDMismatch(t *testing.T) {
	ts := newServer(t, nil)
	first := `{"descriptors": {"tenant": "t6"}, "cost": 2, "request_id": "abc"}`
	resp, m := post(t, ts, "/v1/check", first)
	if resp.StatusCode != 200 {
		t.Fatalf("first: %d %v", resp.StatusCode, m)
	}
	for _, other := range []string{
		`{"descriptors": {"tenant": "other"}, "cost": 2, "request_id": "abc"}`,
		`{"descriptors": {"tenant": "t6"}, "cost": 1, "request_id": "abc"}`,
		`{"descriptors": {"tenant": "t6"}, "request_id": "abc"}`,
		`{"descriptors": {"tenant": "t6", "user": "u"}, "cost": 2, "request_id": "abc"}`,
	} {
		resp, m := post(t, ts, "/v1/check", other)
		if resp.StatusCode != 422 || m["code"] != "request_id_mismatch" {
			t.Fatalf("%s: %d %v", other, resp.StatusCode, m)
		}
	}
	_, peek := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "other"}, "cost": 0}`)
	if got := peek["limits"].([]any)[1].(map[string]any)["tokens_remaining"]; got != 3.0 {
		t.Fatalf("the mismatched request charged tenant other: %v left, want 3", got)
	}
	_, again := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "t6"}, "cost": 2, "request_id": "abc", "retry": true, "max_wait_ms": 5}`)
	if again["allowed"] != true || again["lease"] != m["lease"] {
		t.Fatalf("the same request retried: %v, want the first answer %v", again, m)
	}
	_, peek = post(t, ts, "/v1/check", `{"descriptors": {"tenant": "t6"}, "cost": 0}`)
	if got := peek["limits"].([]any)[1].(map[string]any)["tokens_remaining"]; got != 1.0 {
		t.Fatalf("t6 charged twice: %v left, want 1", got)
	}
}

// Errors answer the JSON {"error", "code"} shape everywhere, without Go's
// names; the Bearer scheme is case-insensitive.
func TestErrorBodies(t *testing.T) {
	ts := newServer(t, func(c *server.Config) { c.AuthToken = "s3cret" })
	resp, body := get(t, ts.URL+"/nope")
	if resp.StatusCode != 404 || body != `{"error":"no endpoint /nope","code":"not_found"}`+"\n" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("404: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/check", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 405 || !strings.Contains(string(b), `"code":"method_not_allowed"`) || resp.Header.Get("Allow") != "POST" {
		t.Errorf("405: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	for _, c := range []struct{ body, want string }{
		{`{"descriptors": {}, "cost": "3"}`, `field "cost": want an integer, not string`},
		{`{"descriptors": {"a": 1}}`, `field "descriptors": each value must be a string, not number`},
		{`{"descriptors": []}`, `field "descriptors": want an object of strings, not array`},
		{`{"descriptors": {}, "retry": "yes"}`, `field "retry": want true or false, not string`},
		{`{"descriptors": {}, "costt": 3}`, `unknown field "costt"`},
		{`[1]`, `the body must be a JSON object, not array`},
		{``, `malformed JSON: the body is empty`},
		{`{"descriptors": {}`, `malformed JSON: the body ends early`},
		{`{"descriptors": x}`, `malformed JSON at byte 17: invalid character 'x' looking for beginning of value`},
	} {
		for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
			resp, m := post(t, ts, "/v1/check", c.body, "Authorization", scheme+" s3cret")
			if resp.StatusCode != 400 || m["code"] != "bad_json" || m["error"] != c.want {
				t.Errorf("%s %q: %d %v, want 400 bad_json %q", scheme, c.body, resp.StatusCode, m, c.want)
			}
			if strings.Contains(fmt.Sprint(m["error"]), "Go ") || strings.Contains(fmt.Sprint(m["error"]), "int64") {
				t.Errorf("%q: Go internals in %q", c.body, m["error"])
			}
		}
	}
	if resp, _ := post(t, ts, "/v1/check", `{"descriptors": {}}`, "Authorization", "Basic s3cret"); resp.StatusCode != 401 {
		t.Errorf("another scheme: %d", resp.StatusCode)
	}
	// Every /v1/ path needs the token, unknown ones and wrong methods too.
	for _, path := range []string{"/v1/nope", "/v1/check"} {
		if resp, body := get(t, ts.URL+path); resp.StatusCode != 401 || !strings.Contains(body, `"code":"unauthorized"`) {
			t.Errorf("GET %s without the token: %d %s", path, resp.StatusCode, body)
		}
	}
}

// A settle's excess goes into debt of at most one capacity: no actual
// cost, however large, locks a shared limit for longer than twice its
// refill time (global: 1000 at 1/s, so at most ~2000 s).
func TestSettleDebtIsBounded(t *testing.T) {
	ts := newServer(t, nil)
	_, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "a"}, "cost": 1}`)
	lease, _ := m["lease"].(string)
	if resp, m := post(t, ts, "/v1/settle", `{"lease": "`+lease+`", "actual_cost": 9000000000000000000}`); resp.StatusCode != 200 {
		t.Fatalf("settle: %d %v", resp.StatusCode, m)
	}
	resp, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "b"}, "cost": 1}`)
	if resp.StatusCode != 429 {
		t.Fatalf("after a huge settle: %d %v", resp.StatusCode, m)
	}
	if ra := m["retry_after_ms"].(float64); ra > 2001000 || ra < 1000000 {
		t.Fatalf("retry_after_ms %v: want at most twice global's refill time (2,000 s)", ra)
	}
}

// When an in-flight cap decides, the RateLimit fields name it (not a
// roomy token bucket): q its max_in_flight, w its lease_ttl.
func TestRateLimitFieldsNameTheInFlightCap(t *testing.T) {
	ts := newServer(t, nil)
	resp, _ := post(t, ts, "/v1/check", `{"descriptors": {"api_key": "k"}}`)
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"tools";r=0;t=30` {
		t.Fatalf("admitted: %d RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	resp, _ = post(t, ts, "/v1/check", `{"descriptors": {"api_key": "k"}}`)
	if resp.StatusCode != 429 || resp.Header.Get("RateLimit") != `"tools";r=0;t=30` ||
		resp.Header.Get("RateLimit-Policy") != `"tools";q=1;w=30` || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("refused by the cap: %d %v", resp.StatusCode, resp.Header)
	}
}
