package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
)

// Every change through the API is one record of GET /v1/audit, with the
// name of the token it came with; /v1/audit takes the admin token.
func TestAuditLogNamesTheActor(t *testing.T) {
	ts := newOverrideServer(t, nil, func(c *server.Config) {
		c.AuthTokens = []server.Token{{Name: "ci", Value: "t-ci"}, {Value: "t-plain"}}
		c.AdminTokens = []server.Token{{Name: "alice", Value: "t-alice"}, {Name: "bob", Value: "t-bob"}}
		c.Instance = "i1"
	})
	admin := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	if code, _ := do(t, ts, "PUT", "/v1/overrides", acme, admin("t-ci")...); code != 401 {
		t.Fatalf("PUT with an auth token: %d, want 401 (the admin token)", code)
	}
	if code, d := do(t, ts, "PUT", "/v1/overrides", acme, admin("t-alice")...); code != 200 {
		t.Fatalf("PUT: %d %v", code, d)
	}
	if code, d := do(t, ts, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}}`, admin("t-bob")...); code != 200 {
		t.Fatalf("DELETE: %d %v", code, d)
	}
	for _, tok := range []string{"t-ci", "t-plain"} {
		if code, d := do(t, ts, "POST", "/v1/pause", `{"descriptors": {"tenant": "zed"}, "retry_after_ms": 1000}`, admin(tok)...); code != 200 {
			t.Fatalf("pause: %d %v", code, d)
		}
	}
	if code, _ := do(t, ts, "GET", "/v1/audit", "", admin("t-ci")...); code != 401 {
		t.Fatalf("/v1/audit with an auth token: %d, want 401", code)
	}
	code, d := do(t, ts, "GET", "/v1/audit", "", admin("t-alice")...)
	if code != 200 {
		t.Fatalf("/v1/audit: %d %v", code, d)
	}
	recs := d["records"].([]any)
	var got []string
	for _, r := range recs {
		m := r.(map[string]any)
		got = append(got, fmt.Sprint(m["action"], "/", m["actor"], "/", m["instance"]))
	}
	if strings.Join(got, " ") != "override_set/alice/i1 override_delete/bob/i1 pause/ci/i1 pause/token/i1" {
		t.Fatalf("records %v", got)
	}
	first := recs[0].(map[string]any)
	ch := first["change"].(map[string]any)
	if ch["limit"] != "tenant_api" || ch["match"].(map[string]any)["tenant"] != "acme" || ch["override"].(map[string]any)["capacity"] != 500.0 ||
		first["via"] != "PUT /v1/overrides" {
		t.Fatalf("the set's record %v", first)
	}
	if p := recs[2].(map[string]any)["change"].(map[string]any); p["retry_after_ms"] != 1000.0 || p["descriptors"].(map[string]any)["tenant"] != "zed" {
		t.Fatalf("the pause's record %v", p)
	}
	// One log record per change, audit true, with the actor.
	if n := strings.Count(ts.log.String(), `"audit":true`); n != 4 {
		t.Fatalf("%d audit log records, want 4:\n%s", n, ts.log.String())
	}
	if !strings.Contains(ts.log.String(), `"actor":"alice"`) {
		t.Fatalf("no actor in the log:\n%s", ts.log.String())
	}
	// since= keeps what came after it.
	if code, d := do(t, ts, "GET", "/v1/audit?since="+fmt.Sprint(time.Now().Add(time.Hour).UnixMilli()), "", admin("t-bob")...); code != 200 || len(d["records"].([]any)) != 0 {
		t.Fatalf("since the future: %d %v", code, d)
	}
	if code, d := do(t, ts, "GET", "/v1/audit?since=1h", "", admin("t-bob")...); code != 200 || len(d["records"].([]any)) != 4 {
		t.Fatalf("since 1h: %d %v", code, d)
	}
	if code, _ := do(t, ts, "GET", "/v1/audit?since=yesterday", "", admin("t-bob")...); code != 400 {
		t.Fatalf("a bad since: %d", code)
	}
	// The server's own changes (a reload) through Server.Audit.
	ts.srv.Audit(context.Background(), server.ActorSystem, "policy_reload", "SIGHUP", "", map[string]any{"old_policy_version": "a"})
	if _, d := do(t, ts, "GET", "/v1/audit", "", admin("t-bob")...); len(d["records"].([]any)) != 5 {
		t.Fatalf("after Audit: %v", d)
	}
}

func TestMemoryAuditKeepsTheLast(t *testing.T) {
	m := server.NewMemoryAudit(3)
	for i := range 5 {
		m.AppendAudit(context.Background(), []byte(fmt.Sprint(i)))
	}
	got, _ := m.AuditSince(context.Background(), 0, 10)
	if fmt.Sprintf("%s", got) != "[2 3 4]" {
		t.Fatalf("%s", got)
	}
	if got, _ := m.AuditSince(context.Background(), 0, 2); fmt.Sprintf("%s", got) != "[3 4]" {
		t.Fatalf("n 2: %s", got)
	}
}

// An override whose ttl passes is swept at the next sync and recorded as
// expired by the system.
func TestAuditRecordsAnExpiry(t *testing.T) {
	ts := newOverrideServer(t, nil, nil)
	if code, d := do(t, ts, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "brief"}, "capacity": 5, "ttl_s": 1}`); code != 200 {
		t.Fatalf("PUT: %d %v", code, d)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := ts.srv.SyncOverridesNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, d := do(t, ts, "GET", "/v1/audit", "")
	recs := d["records"].([]any)
	last := recs[len(recs)-1].(map[string]any)
	if len(recs) != 2 || last["action"] != "override_expire" || last["actor"] != "system" ||
		last["change"].(map[string]any)["match"].(map[string]any)["tenant"] != "brief" {
		t.Fatalf("records %v", recs)
	}
}
