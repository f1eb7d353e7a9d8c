package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The heaviest keys over HTTP: /v1/top ranks refused requests and admitted
// cost per key, shows redacted descriptors hashed, refuses bad queries, and
// `sluice top --once` prints it; --top-keys 0 turns it off.
func TestServeTopKeys(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "redact: [api_key]\nlimits:\n  - name: per_tenant\n    key: \"tenant:{tenant}\"\n    capacity: 3\n    refill_per_second: 0.01\n  - name: per_key\n    key: \"api_key:{api_key}\"\n    capacity: 1000\n    refill_per_second: 1\n")
	p := serve(t, "--config", pol, "--top-keys", "5")
	for i := range 40 {
		tenant := "noisy"
		if i%4 == 0 {
			tenant = fmt.Sprint("quiet-", i)
		}
		call(t, p, "POST", "/v1/check", fmt.Sprintf(`{"descriptors":{"tenant":%q,"api_key":"sk-secret"},"cost":%d}`, tenant, 1+i%2))
	}
	code, body := call(t, p, "GET", "/v1/top?limit=per_tenant&by=refused&span=1m", "")
	var a struct {
		Limit, By, Span string
		Keys            []struct {
			Key          string
			Count, Error int64
		}
	}
	if err := json.Unmarshal([]byte(body), &a); code != 200 || err != nil || a.Limit != "per_tenant" || a.By != "refused" || a.Span != "1m0s" {
		t.Fatalf("%d %s %v", code, body, err)
	}
	// noisy: 30 checks of cost 1 or 2 on a bucket of 3 that hardly refills: all but the first two refused
	if len(a.Keys) != 1 || a.Keys[0].Key != "tenant:noisy" || a.Keys[0].Count < 27 || a.Keys[0].Error != 0 {
		t.Fatalf("rule: the tenant that is refused tops the refused list: %s", body)
	}
	_, body = call(t, p, "GET", "/v1/top?limit=per_key&by=admitted", "")
	if strings.Contains(body, "sk-secret") || !strings.Contains(body, `"key":"api_key:#`) {
		t.Fatalf("rule: redacted descriptors show hashed: %s", body)
	}
	for q, want := range map[string]string{
		"limit=nope": "unknown_limit", "limit=per_key&by=x": "bad_request", "limit=per_key&span=16m": "bad_request",
		"limit=per_key&n=0": "bad_request", "": "limit is required",
	} {
		if code, body := call(t, p, "GET", "/v1/top?"+q, ""); code != 400 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
	code, out, errOut := runCmd(t, "", "top", "--url", p.addr, "--once", "--limit", "per_tenant")
	if code != 0 || !strings.Contains(out, "per_tenant (refused, k=5)") || !strings.Contains(out, "tenant:noisy") {
		t.Fatalf("sluice top --once: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCmd(t, "", "top", "--url", p.addr, "--once", "--by", "admitted")
	if code != 0 || !strings.Contains(out, "per_key (admitted cost") || !strings.Contains(out, "per_tenant (admitted cost") {
		t.Fatalf("sluice top --once without --limit lists every limit: %d\n%s", code, out)
	}
	shadowPol := filepath.Join(t.TempDir(), "s.yaml")
	writePolicy(t, shadowPol, "limits:\n  - {name: trial, key: \"t:{t}\", capacity: 1, refill_per_second: 0.01, shadow: true}\n")
	sp := serve(t, "--config", shadowPol)
	for range 3 {
		call(t, sp, "POST", "/v1/check", `{"descriptors":{"t":"a"}}`)
	}
	if code, out, _ := runCmd(t, "", "top", "--url", sp.addr, "--once"); code != 0 || !strings.Contains(out, "trial (would refuse: shadow, k=100)") || !strings.Contains(out, "t:a") {
		t.Fatalf("rule: sluice top marks a shadow limit's would-be refusals: %d\n%s", code, out)
	}
	if code, _, errOut := runCmd(t, "", "top", "--url", "localhost:1", "--once"); code != 2 || !strings.Contains(errOut, "--url") {
		t.Fatalf("a bad --url: %d %s", code, errOut)
	}
	off := serve(t, "--config", pol, "--top-keys", "0")
	if code, body := call(t, off, "GET", "/v1/top?limit=per_key", ""); code != 404 || !strings.Contains(body, "top_off") {
		t.Fatalf("--top-keys 0: %d %s", code, body)
	}
}

// Shadow mode over HTTP: per limit (shadow: true) and for the whole
// server (--shadow), a would-be refusal answers 200 with shadow_refused and
// the RateLimit fields as if enforced, and is counted as shadow_rejected.
func TestServeShadow(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: trial\n    key: \"t:{t}\"\n    capacity: 1\n    refill_per_second: 0.01\n    shadow: true\n  - name: real\n    key: \"t:{t}\"\n    capacity: 2\n    refill_per_second: 0.01\n")
	p := serve(t, "--config", pol)
	call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"a"}}`)
	req, _ := http.NewRequest("POST", p.addr+"/v1/check", strings.NewReader(`{"descriptors":{"t":"a"}}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"shadow_refused":true`) || !strings.Contains(res.Header.Get("RateLimit"), `"trial";r=0`) {
		t.Fatalf("rule: a shadow limit's would-be refusal answers 200 with shadow_refused and its RateLimit as if enforced: %d %s %v", res.StatusCode, b, res.Header)
	}
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"a"}}`); code != 429 {
		t.Fatalf("the enforced limit still refuses: %d", code)
	}
	if _, m := call(t, p, "GET", "/metrics", ""); !strings.Contains(m, `sluice_decisions_total{attempt="original",limit="trial",result="shadow_rejected"} 2`) {
		t.Fatalf("rule: counted as shadow_rejected:\n%s", m)
	}
	all := serve(t, "--config", pol, "--shadow")
	for i := range 5 {
		if code, body := call(t, all, "POST", "/v1/check", `{"descriptors":{"t":"b"}}`); code != 200 || (i >= 2 && !strings.Contains(body, `"name":"real"`)) {
			t.Fatalf("rule: --shadow refuses nothing: %d %s", code, body)
		}
	}
}

// docs/grafana-sluice.json charts series /metrics serves: every sluice_
// metric its queries name exists (after a decision of each kind).
func TestGrafanaDashboardNamesServedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana-sluice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana-sluice.json: %v", err)
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 1\n    refill_per_second: 100\n")
	p := serve(t, "--config", pol)
	for range 3 { // the second and third wait their turn (a booking), the first leaves less than 20 %
		call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"a"},"max_wait_ms":1000}`)
	}
	_, metrics := call(t, p, "GET", "/metrics", "")
	names := regexp.MustCompile(`sluice_[a-z_]+`).FindAllString(string(raw), -1)
	if len(names) < 8 {
		t.Fatalf("only %d metric names in the dashboard", len(names))
	}
	for _, n := range names {
		base := strings.TrimSuffix(n, "_bucket")
		if !strings.Contains(metrics, "\n"+base) && !strings.Contains(metrics, "# TYPE "+base+" ") {
			t.Errorf("the dashboard charts %s, which /metrics does not serve", n)
		}
	}
}
