// The audit log through real processes: named tokens, a reload's record,
// and on Redis every instance's changes listed by every instance.

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseTokens(t *testing.T) {
	ts, err := parseTokens("# the team's tokens\nalice: t-alice\n\nplain-token-without-name\nci:abc:def\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 || ts[0].Name != "alice" || ts[0].Value != "t-alice" || ts[1].Name != "" || ts[1].Value != "plain-token-without-name" ||
		ts[2].Name != "ci" || ts[2].Value != "abc:def" {
		t.Fatalf("%+v", ts)
	}
	// One plain token, as files held before names: its own line.
	if ts, err := parseTokens("s3cret\n"); err != nil || len(ts) != 1 || ts[0].Value != "s3cret" || ts[0].Name != "" {
		t.Fatalf("%+v %v", ts, err)
	}
	for _, bad := range []string{"", "\n# only a comment\n", "a:\n", "a:x\na:y\n", "a:x\nb:x\n"} {
		if _, err := parseTokens(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// auditRecords is GET /v1/audit's records from p with token.
func auditRecords(t *testing.T, p *proc, token, query string) []map[string]any {
	t.Helper()
	code, body := call(t, p, "GET", "/v1/audit"+query, "", "Authorization", "Bearer "+token)
	if code != 200 {
		t.Fatalf("/v1/audit: %d %s", code, body)
	}
	var a struct {
		Records []map[string]any `json:"records"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	return a.Records
}

func TestServeAuditOnRedis(t *testing.T) {
	srv := startRedis(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 10\n    refill_per_second: 1\n  - name: old_one\n    key: \"user:{user}\"\n    capacity: 5\n    refill_per_second: 1\n")
	admin := filepath.Join(dir, "admin")
	os.WriteFile(admin, []byte("alice:t-alice\nbob: t-bob\n"), 0o600)
	auth := filepath.Join(dir, "auth")
	os.WriteFile(auth, []byte("ci:t-ci\n"), 0o600)
	store := "redis://" + srv.Addr
	args := []string{"--config", pol, "--store", store, "--admin-token-file", admin, "--auth-token-file", auth, "--reload", "0"}
	a := serve(t, args...)
	b := serve(t, args...)
	// Alice sets an override on A; ci pauses on B.
	if code, body := call(t, a, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}, "capacity": 50}`,
		"Authorization", "Bearer t-alice"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if code, body := call(t, b, "POST", "/v1/pause", `{"descriptors": {"tenant": "zed"}, "retry_after_ms": 500}`, "Authorization", "Bearer t-ci"); code != 200 {
		t.Fatalf("pause: %d %s", code, body)
	}
	// A reload on B: old_one removed, tenant_api changed, new_one added.
	writePolicy(t, pol, "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 20\n    refill_per_second: 1\n  - name: new_one\n    key: \"user:{user}\"\n    capacity: 5\n    refill_per_second: 1\n")
	b.cmd.Process.Signal(syscall.SIGHUP)
	b.waitLog(t, `"msg":"audit: policy_reload"`)
	// Every instance lists every instance's changes.
	for _, p := range []*proc{a, b} {
		recs := auditRecords(t, p, "t-bob", "?since=1h")
		var got []string
		for _, r := range recs {
			got = append(got, r["action"].(string)+"/"+r["actor"].(string))
		}
		if strings.Join(got, " ") != "override_set/alice pause/ci policy_reload/system" {
			t.Fatalf("records on %s: %v", p.addr, got)
		}
		if recs[0]["instance"] == recs[1]["instance"] {
			t.Fatalf("one instance named for both: %v", recs)
		}
		ch := recs[2]["change"].(map[string]any)
		if ch["old_policy_version"] == ch["new_policy_version"] || ch["old_policy_version"] == "" ||
			strings.Join(asStrings(ch["limits_added"]), ",") != "new_one" || strings.Join(asStrings(ch["limits_removed"]), ",") != "old_one" ||
			strings.Join(asStrings(ch["limits_changed"]), ",") != "tenant_api" || recs[2]["via"] != "SIGHUP" {
			t.Fatalf("the reload's record %v", recs[2])
		}
	}
	// Each change is one log record with audit true and its actor.
	a.waitLog(t, `"actor":"alice"`)
	b.waitLog(t, `"audit":true,"actor":"ci","action":"pause"`)
	// /v1/audit takes the admin token.
	if code, _ := call(t, a, "GET", "/v1/audit", "", "Authorization", "Bearer t-ci"); code != 401 {
		t.Fatalf("/v1/audit with the auth token: %d", code)
	}
	if recs := auditRecords(t, a, "t-alice", "?since="+time.Now().Add(time.Minute).UTC().Format(time.RFC3339)); len(recs) != 0 {
		t.Fatalf("since a minute ahead: %v", recs)
	}
}

func asStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
