// Tests of sluice overrides: its subcommands against a real sluice serve, its usage errors and the bodies it sends.

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const overridesPolicy = `limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: per_route
    key: "route:{route}"
    algorithm: sliding_window
    limit: 5
    window: 1m
`

// sluice overrides against a real sluice serve: set (text and --json),
// get, list (a table, pages, --json), resolve, delete; the service's
// errors with their code, exit 1.
func TestOverridesCommands(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, overridesPolicy)
	p := serve(t, "--config", pol)
	ov := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, "", append([]string{"overrides", "--url", p.addr}, args...)...)
	}
	code, out, errOut := ov("set", "tenant_api", "tenant=acme", "--capacity", "500", "--refill-per-second", "50", "--ttl", "24h", "--note", "trial")
	if code != 0 || !strings.Contains(out, `tenant_api {"tenant":"acme"}  capacity=500 refill_per_second=50`) ||
		!strings.Contains(out, `note "trial"`) || !strings.Contains(out, "(ttl_s 86400)") {
		t.Fatalf("set: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = ov("set", "tenant_api", "tenant=premium_*", "--capacity", "100", "--json")
	var rec map[string]any
	if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || rec["capacity"] != 100.0 || rec["expires_at"] != nil {
		t.Fatalf("set --json: %d %v %s", code, err, out)
	}
	if code, out, _ := ov("set", "per_route", "route=/login", "--limit", "3", "--window", "2m", "--block-for", "10m", "--shadow"); code != 0 ||
		!strings.Contains(out, "limit=3 window=2m shadow block_for=10m") {
		t.Fatalf("set of a window limit: %d\n%s", code, out)
	}
	if code, out, _ := ov("get", "tenant_api", "tenant=acme"); code != 0 || !strings.Contains(out, "capacity=500") || !strings.Contains(out, "matched 0, last never") {
		t.Fatalf("get: %d\n%s", code, out)
	}
	if code, _, errOut := ov("get", "tenant_api", "tenant=nobody"); code != 1 || !strings.Contains(errOut, `no override with the match {"tenant":"nobody"}`) {
		t.Fatalf("get of none: %d %s", code, errOut)
	}
	code, out, _ = ov("list", "tenant_api")
	if code != 0 || !strings.HasPrefix(out, "MATCH ") || !strings.Contains(out, `{"tenant":"acme"}`) || !strings.Contains(out, `{"tenant":"premium_*"}`) || strings.Contains(out, "more:") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	code, out, _ = ov("list", "tenant_api", "--n", "1")
	i := strings.Index(out, "more: --cursor ")
	if code != 0 || i < 0 || strings.Contains(out, "premium") {
		t.Fatalf("list --n 1: %d\n%s", code, out)
	}
	cursor := strings.TrimSpace(out[i+len("more: --cursor "):])
	if code, out, _ := ov("list", "tenant_api", "--n", "1", "--cursor", cursor); code != 0 || !strings.Contains(out, "premium_*") || strings.Contains(out, "acme") {
		t.Fatalf("list --cursor: %d\n%s", code, out)
	}
	code, out, _ = ov("list", "tenant_api", "tenant=acme", "--json")
	var page struct {
		Overrides []map[string]any `json:"overrides"`
	}
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Overrides) != 1 || page.Overrides[0]["note"] != "trial" {
		t.Fatalf("list with a filter, --json: %d %v %s", code, err, out)
	}
	for _, tc := range []struct{ desc, want string }{
		{"tenant=premium_gold", `tenant_api {"tenant":"premium_gold"}: the override {"tenant":"premium_*"} applies` + "\n  in force: token_bucket capacity=100"},
		{"tenant=other", "no override matches: the policy's limit applies\n  in force: token_bucket capacity=10 refill_per_second=1"},
		{"route=/x", "the limit does not apply to these descriptors (its key is tenant:{tenant})"},
	} {
		if code, out, _ := ov("resolve", "tenant_api", tc.desc); code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("resolve %s: %d\n%s\nwant %q", tc.desc, code, out, tc.want)
		}
	}
	if code, out, _ := ov("resolve", "tenant_api", "tenant=acme", "--json"); code != 0 || !strings.Contains(out, `"source":"override"`) {
		t.Errorf("resolve --json: %d %s", code, out)
	}
	if code, out, _ := ov("delete", "tenant_api", "tenant=acme"); code != 0 || out != "deleted tenant_api {\"tenant\":\"acme\"}\n" {
		t.Fatalf("delete: %d %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"delete", "tenant_api", "tenant=acme"}, "(code not_found, HTTP 404)"},
		{[]string{"set", "tenant_api", "tenant=a", "--limit", "5"}, "(code kind_mismatch, HTTP 422)"},
		{[]string{"set", "tenant_api", "route=a", "--capacity", "5"}, `does not use descriptor "route"`},
		{[]string{"set", "tenant_api", "tenant=a*b", "--capacity", "5"}, "(code bad_request, HTTP 400)"},
		{[]string{"set", "tenant_api", "tenant=a", "--deny", "--capacity", "5"}, "(code bad_request, HTTP 400)"},
		{[]string{"set", "nope", "tenant=a", "--capacity", "5"}, "(code unknown_limit, HTTP 404)"},
		{[]string{"list", "nope"}, "(code unknown_limit, HTTP 404)"},
	} {
		if code, _, errOut := ov(tc.args...); code != 1 || !strings.Contains(errOut, tc.want) || !strings.HasPrefix(errOut, "sluice: ") {
			t.Errorf("%v: %d %q, want exit 1 with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// Bad arguments are usage errors (exit 2) and send nothing; set sends the
// flags given and only them (a zero too), --ttl as ttl_s.
func TestOverridesArguments(t *testing.T) {
	var bodies []map[string]any
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		raw, _ := io.ReadAll(r.Body)
		json.Unmarshal(raw, &b)
		bodies = append(bodies, b)
		w.Write([]byte(`{"name":"tenant_api","match":{}}`))
	}))
	defer ts.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "tenant_api", "tenant"}, `"tenant" is not KEY=VALUE`},
		{[]string{"set", "tenant_api", "=a"}, `"=a" is not KEY=VALUE`},
		{[]string{"get", "tenant_api", "a=1", "a=2"}, "a given twice"},
		{[]string{"delete", "tenant_api", "x"}, `"x" is not KEY=VALUE`},
		{[]string{"set", "tenant_api", "tenant=a", "--ttl", "1.5s"}, "--ttl 1.5s: must be a whole number of seconds"},
		{[]string{"set", "tenant_api", "tenant=a", "--ttl", "soon"}, "--ttl:"},
		{[]string{"resolve", "tenant_api"}, "resolve needs the request's descriptors"},
		{[]string{"list", "tenant_api", "--n", "1001"}, "--n 1001 must be 1 to 1000"},
		{[]string{"list", "tenant_api", "--n", "0"}, "--n 0 must be 1 to 1000"},
		{[]string{"set"}, "expected \"<name>\""},
	} {
		if code, _, errOut := runCmd(t, "", append([]string{"overrides", "--url", ts.URL}, tc.args...)...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: %d %q, want exit 2 with %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, _, errOut := runCmd(t, "", "overrides", "--url", "localhost:1", "list", "tenant_api"); code != 2 || !strings.Contains(errOut, "--url") {
		t.Errorf("a bad --url: %d %q", code, errOut)
	}
	if len(bodies) != 0 {
		t.Fatalf("a usage error sent %v", bodies)
	}
	// The service's flags may follow the subcommand too.
	code, _, errOut := runCmd(t, "", "overrides", "set", "tenant_api", "tenant=a", "v=x=y", "--capacity", "0", "--ttl", "7d", "--deny", "--note", "", "--url", ts.URL)
	want := map[string]any{"name": "tenant_api", "match": map[string]any{"tenant": "a", "v": "x=y"}, "capacity": 0.0, "deny": true, "ttl_s": 604800.0, "note": ""}
	if code != 0 || len(bodies) != 1 || !reflect.DeepEqual(bodies[0], want) {
		t.Fatalf("set sent %v (exit %d %s), want %v", bodies, code, errOut, want)
	}
	runCmd(t, "", "overrides", "--url", ts.URL, "set", "tenant_api")
	if want := map[string]any{"name": "tenant_api", "match": map[string]any{}}; len(bodies) != 2 || !reflect.DeepEqual(bodies[1], want) {
		t.Fatalf("set without flags sent %v, want %v", bodies[1:], want)
	}
}

// --token-file (or $SLUICE_OVERRIDES_TOKEN_FILE) sends the admin token.
func TestOverridesToken(t *testing.T) {
	dir := t.TempDir()
	pol, tok := filepath.Join(dir, "p.yaml"), filepath.Join(dir, "admin")
	writePolicy(t, pol, overridesPolicy)
	if err := os.WriteFile(tok, []byte("adm1n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := serve(t, "--config", pol, "--admin-token-file", tok)
	if code, _, errOut := runCmd(t, "", "overrides", "--url", p.addr, "list", "tenant_api"); code != 1 || !strings.Contains(errOut, "(code unauthorized, HTTP 401)") {
		t.Fatalf("without the token: %d %q", code, errOut)
	}
	if code, out, errOut := runCmd(t, "", "overrides", "--url", p.addr, "--token-file", tok, "set", "tenant_api", "tenant=a", "--capacity", "2"); code != 0 || !strings.Contains(out, "capacity=2") {
		t.Fatalf("--token-file: %d %s %s", code, out, errOut)
	}
	t.Setenv("SLUICE_OVERRIDES_TOKEN_FILE", tok)
	if code, out, errOut := runCmd(t, "", "overrides", "--url", p.addr, "list", "tenant_api"); code != 0 || !strings.Contains(out, `{"tenant":"a"}`) {
		t.Fatalf("$SLUICE_OVERRIDES_TOKEN_FILE: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "", "overrides", "--url", p.addr, "--token-file", filepath.Join(dir, "none"), "list", "tenant_api"); code != 1 || !strings.Contains(errOut, "--token-file") {
		t.Fatalf("a missing token file: %d %q", code, errOut)
	}
}
