// Tests of /v1/overrides: every endpoint and error, who may write, the
// audit record, the gauge and /v1/policy's counts, and two servers sharing
// one store.

package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

const ovPolicy = `
limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: daily
    key: "user:{user}"
    algorithm: sliding_window
    limit: 100
    window: 24h
overrides:
  - name: tenant_api
    match: {tenant: vip}
    capacity: 1000
`

// syncBuf is a log destination safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type ovServer struct {
	*httptest.Server
	srv *server.Server
	set *overrides.Set
	reg *prometheus.Registry
	log *syncBuf
}

// newOverrideServer serves ovPolicy with overrides kept in st (a new
// MemStore when nil).
func newOverrideServer(t *testing.T, st overrides.Store, mutate func(*server.Config)) *ovServer {
	t.Helper()
	p, err := policy.Parse([]byte(ovPolicy))
	if err != nil {
		t.Fatal(err)
	}
	fromPolicy, err := overrides.FromPolicy(p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	set := overrides.NewSet(p)
	if errs := set.SetPolicy(p, fromPolicy); len(errs) > 0 {
		t.Fatal(errs)
	}
	if st == nil {
		ms, err := overrides.NewMemStore(overrides.MemOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st = ms
	}
	reg := prometheus.NewRegistry()
	l, err := limiter.New(p, memstore.New(), limiter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	cfg := server.Config{Limiter: l, Gatherer: reg, Registerer: reg, Overrides: set, OverrideStore: st,
		LoopbackListener: true, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &ovServer{Server: ts, srv: s, set: set, reg: reg, log: logs}
}

// do sends a request and decodes the JSON answer.
func do(t *testing.T, ts *ovServer, method, path, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: %d %q is not a JSON object", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

const acme = `{"name": "tenant_api", "match": {"tenant": "acme"}, "capacity": 500, "refill_per_second": 50, "ttl_s": 86400, "note": "trial"}`

func TestOverridesPutListResolveDelete(t *testing.T) {
	t.Parallel()
	ts := newOverrideServer(t, nil, nil)
	code, o := do(t, ts, "PUT", "/v1/overrides", acme)
	if code != 200 || o["name"] != "tenant_api" || o["capacity"] != 500.0 || o["note"] != "trial" || o["source"] != "api" {
		t.Fatalf("PUT: %d %v", code, o)
	}
	created, err := time.Parse(time.RFC3339, o["created_at"].(string))
	if err != nil || time.Since(created) > time.Minute {
		t.Fatalf("created_at %v: %v", o["created_at"], err)
	}
	if exp, _ := time.Parse(time.RFC3339, o["expires_at"].(string)); exp.Sub(created) != 24*time.Hour {
		t.Fatalf("expires_at %v, created_at %v", o["expires_at"], o["created_at"])
	}
	// Without ttl_s, expires_at is null.
	if code, o := do(t, ts, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "premium_*"}, "capacity": 50}`); code != 200 || o["expires_at"] != nil {
		t.Fatalf("PUT prefix: %d %v", code, o)
	}
	// Replacing keeps created_at.
	time.Sleep(5 * time.Millisecond)
	if code, o2 := do(t, ts, "PUT", "/v1/overrides", strings.Replace(acme, "500", "600", 1)); code != 200 || o2["created_at"] != o["created_at"] || o2["updated_at"] == o["updated_at"] || o2["capacity"] != 600.0 {
		t.Fatalf("replace: %d %v", code, o2)
	}

	// The list: the API's two and the policy file's one, in canonical order.
	code, l := do(t, ts, "GET", "/v1/overrides?limit=tenant_api", "")
	list, _ := l["overrides"].([]any)
	if code != 200 || len(list) != 3 || l["next_cursor"] != nil {
		t.Fatalf("list: %d %v", code, l)
	}
	var sources []string
	for _, x := range list {
		e := x.(map[string]any)
		sources = append(sources, e["match"].(map[string]any)["tenant"].(string)+"="+e["source"].(string))
		if _, ok := e["matched_total"]; !ok {
			t.Fatalf("no matched_total: %v", e)
		}
		if _, ok := e["last_matched_at"]; !ok {
			t.Fatalf("no last_matched_at: %v", e)
		}
	}
	if got := strings.Join(sources, " "); got != "acme=api premium_*=api vip=policy" {
		t.Fatalf("listed %s", got)
	}
	// Pages of one, through the cursor.
	var seen []string
	cursor := ""
	for range 5 {
		code, l := do(t, ts, "GET", "/v1/overrides?limit=tenant_api&n=1&cursor="+cursor, "")
		page := l["overrides"].([]any)
		if code != 200 || len(page) != 1 {
			t.Fatalf("page: %d %v", code, l)
		}
		seen = append(seen, page[0].(map[string]any)["match"].(map[string]any)["tenant"].(string))
		if l["next_cursor"] == nil {
			break
		}
		cursor = l["next_cursor"].(string)
	}
	if strings.Join(seen, " ") != "acme premium_* vip" {
		t.Fatalf("pages: %v", seen)
	}
	// An exact filter (the value as written).
	if code, l := do(t, ts, "GET", "/v1/overrides?limit=tenant_api&match.tenant=premium_*", ""); code != 200 || len(l["overrides"].([]any)) != 1 {
		t.Fatalf("filter: %d %v", code, l)
	}
	if code, l := do(t, ts, "GET", "/v1/overrides?limit=daily", ""); code != 200 || len(l["overrides"].([]any)) != 0 {
		t.Fatalf("empty list: %d %v", code, l)
	}

	// Resolve: the prefix, the exact value, the policy file's, the policy.
	for _, c := range []struct {
		tenant, source string
		capacity       float64
	}{{"premium_x", "override", 50}, {"acme", "override", 600}, {"vip", "override", 1000}, {"other", "policy_limit", 10}} {
		code, r := do(t, ts, "GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant="+c.tenant, "")
		eff, _ := r["effective"].(map[string]any)
		if code != 200 || r["source"] != c.source || r["applies"] != true || eff["capacity"] != c.capacity {
			t.Fatalf("resolve %s: %d %v", c.tenant, code, r)
		}
		if (c.source == "override") != (r["override"] != nil) {
			t.Fatalf("resolve %s: override %v", c.tenant, r["override"])
		}
	}
	if code, r := do(t, ts, "GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.user=x", ""); code != 200 || r["source"] != "none" || r["applies"] != false {
		t.Fatalf("resolve where the limit does not apply: %d %v", code, r)
	}

	// /v1/policy counts, and the gauge.
	code, p := do(t, ts, "GET", "/v1/policy", "")
	lims := p["limits"].([]any)
	if code != 200 || lims[0].(map[string]any)["overrides"] != 3.0 || lims[1].(map[string]any)["overrides"] != 0.0 {
		t.Fatalf("policy: %d %v", code, lims)
	}
	assertGauge(t, ts, map[string]float64{"tenant_api": 3, "daily": 0})

	// Delete: 200 with the override, then 404.
	code, d := do(t, ts, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}}`)
	if code != 200 || d["capacity"] != 600.0 || d["note"] != "trial" {
		t.Fatalf("DELETE: %d %v", code, d)
	}
	if code, d := do(t, ts, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}}`); code != 404 || d["code"] != "not_found" {
		t.Fatalf("DELETE again: %d %v", code, d)
	}
	if code, r := do(t, ts, "GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant=acme", ""); code != 200 || r["source"] != "policy_limit" {
		t.Fatalf("resolve after delete: %d %v", code, r)
	}
	assertGauge(t, ts, map[string]float64{"tenant_api": 2, "daily": 0})

	// Every change is one audit record.
	var changes []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(ts.log.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["audit"] == true {
			changes = append(changes, rec)
		}
	}
	if len(changes) != 4 {
		t.Fatalf("%d audit records, want 4 (3 sets, 1 delete):\n%s", len(changes), ts.log.String())
	}
	last := changes[3]
	if last["msg"] != "override changed" || last["action"] != "delete" || last["limit"] != "tenant_api" ||
		last["match"].(map[string]any)["tenant"] != "acme" || last["override"].(map[string]any)["capacity"] != 600.0 ||
		!strings.HasPrefix(last["remote_addr"].(string), "127.0.0.1:") {
		t.Fatalf("audit record %v", last)
	}
}

func assertGauge(t *testing.T, ts *ovServer, want map[string]float64) {
	t.Helper()
	mfs, err := ts.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_overrides" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if len(got) != len(want) {
		t.Fatalf("sluice_overrides %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("sluice_overrides %v, want %v", got, want)
		}
	}
}

// Each error answers its code and status, and changes nothing.
func TestOverridesErrors(t *testing.T) {
	t.Parallel()
	ts := newOverrideServer(t, nil, func(c *server.Config) { c.MaxBodyBytes = 4096 })
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"PUT", "/v1/overrides", `{"name": "nope", "match": {"tenant": "a"}, "capacity": 5}`, 404, "unknown_limit"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a"}, "limit": 5}`, 422, "kind_mismatch"},
		{"PUT", "/v1/overrides", `{"name": "daily", "match": {"user": "a"}, "capacity": 5}`, 422, "kind_mismatch"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"user": "a"}, "capacity": 5}`, 422, "unknown_descriptor"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a*b"}, "capacity": 5}`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a"}, "capacity": -1}`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a"}, "capacity": 1.5}`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a"}, "refill": "fast"}`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "daily", "match": {"user": "a"}, "window": "soon"}`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a"}, "deny": true, "capacity": 5}`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a"}, "Capacity": 5}`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api"`, 400, "bad_request"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "vip"}, "capacity": 5}`, 409, "policy_override"},
		{"PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "a"}, "note": "` + strings.Repeat("x", 5000) + `"}`, 413, "body_too_large"},
		{"DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "vip"}}`, 409, "policy_override"},
		{"DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "nobody"}}`, 404, "not_found"},
		{"DELETE", "/v1/overrides", `{"name": "nope", "match": {"tenant": "nobody"}}`, 404, "unknown_limit"},
		{"DELETE", "/v1/overrides", `{"name": "tenant_api"}`, 400, "bad_request"},
		{"DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {}, "capacity": 1}`, 400, "bad_request"},
		{"GET", "/v1/overrides", "", 400, "bad_request"},
		{"GET", "/v1/overrides?limit=nope", "", 404, "unknown_limit"},
		{"GET", "/v1/overrides?limit=tenant_api&match.user=a", "", 422, "unknown_descriptor"},
		{"GET", "/v1/overrides?limit=tenant_api&n=0", "", 400, "bad_request"},
		{"GET", "/v1/overrides?limit=tenant_api&n=1001", "", 400, "bad_request"},
		{"GET", "/v1/overrides?limit=tenant_api&cursor=!!", "", 400, "bad_request"},
		{"GET", "/v1/overrides?limit=tenant_api&color=red", "", 400, "bad_request"},
		{"GET", "/v1/overrides?limit=tenant_api&limit=daily", "", 400, "bad_request"},
		{"GET", "/v1/overrides/resolve?limit=nope&descriptors.tenant=a", "", 404, "unknown_limit"},
		{"GET", "/v1/overrides/resolve?descriptors.tenant=a", "", 400, "bad_request"},
		{"GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant=" + strings.Repeat("v", 1025), "", 400, "bad_request"},
		{"GET", "/v1/overrides/resolve?limit=tenant_api&match.tenant=a", "", 400, "bad_request"},
		{"POST", "/v1/overrides", `{}`, 405, "method_not_allowed"},
	} {
		code, body := do(t, ts, c.method, c.path, c.body)
		if code != c.status || body["code"] != c.code || body["error"] == "" {
			t.Errorf("%s %s %.80s: %d %v, want %d %s", c.method, c.path, c.body, code, body, c.status, c.code)
		}
	}
	// Nothing changed: the policy file's override alone.
	if code, l := do(t, ts, "GET", "/v1/overrides?limit=tenant_api", ""); code != 200 || len(l["overrides"].([]any)) != 1 {
		t.Fatalf("after the errors: %d %v", code, l)
	}
	if strings.Contains(ts.log.String(), `"audit":true`) {
		t.Fatalf("a refused change was logged as one:\n%s", ts.log.String())
	}
}

func TestOverridesTooMany(t *testing.T) {
	t.Parallel()
	ms, err := overrides.NewMemStore(overrides.MemOptions{Max: 2})
	if err != nil {
		t.Fatal(err)
	}
	ts := newOverrideServer(t, ms, nil)
	put := func(tenant string) (int, map[string]any) {
		return do(t, ts, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "`+tenant+`"}, "capacity": 5}`)
	}
	for _, tenant := range []string{"a", "b"} {
		if code, b := put(tenant); code != 200 {
			t.Fatalf("%s: %d %v", tenant, code, b)
		}
	}
	if code, b := put("c"); code != 422 || b["code"] != "too_many_overrides" {
		t.Fatalf("third: %d %v", code, b)
	}
	if code, b := put("a"); code != 200 { // a replacement is always accepted
		t.Fatalf("replacement: %d %v", code, b)
	}
	if code, l := do(t, ts, "GET", "/v1/overrides?limit=tenant_api", ""); code != 200 || len(l["overrides"].([]any)) != 3 {
		t.Fatalf("list: %d %v", code, l)
	}
}

// Who may: the admin token when set (the auth token is not enough, and
// checks keep the auth token); else the auth token; with neither, writes
// only on a loopback listener.
func TestOverridesAuth(t *testing.T) {
	t.Parallel()
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	t.Run("admin token", func(t *testing.T) {
		t.Parallel()
		ts := newOverrideServer(t, nil, func(c *server.Config) { c.AdminToken, c.AuthToken = "adm1n", "us3r" })
		for _, c := range []struct {
			method, path, body string
			hdr                []string
			status             int
		}{
			{"PUT", "/v1/overrides", acme, nil, 401},
			{"PUT", "/v1/overrides", acme, bearer("us3r"), 401},
			{"PUT", "/v1/overrides", acme, bearer("wrong"), 401},
			{"GET", "/v1/overrides?limit=tenant_api", "", bearer("us3r"), 401},
			{"GET", "/v1/overrides/resolve?limit=tenant_api", "", nil, 401},
			{"PUT", "/v1/overrides", acme, bearer("adm1n"), 200},
			{"GET", "/v1/overrides?limit=tenant_api", "", bearer("adm1n"), 200},
			{"GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant=acme", "", bearer("adm1n"), 200},
			{"DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}}`, bearer("adm1n"), 200},
			{"POST", "/v1/check", `{"descriptors": {"tenant": "a"}}`, bearer("us3r"), 200},
			{"POST", "/v1/check", `{"descriptors": {"tenant": "a"}}`, bearer("adm1n"), 401},
			{"GET", "/v1/policy", "", bearer("us3r"), 200},
		} {
			code, b := do(t, ts, c.method, c.path, c.body, c.hdr...)
			if code != c.status || code == 401 && b["code"] != "unauthorized" {
				t.Errorf("%s %s with %v: %d %v, want %d", c.method, c.path, c.hdr, code, b, c.status)
			}
		}
	})
	t.Run("auth token", func(t *testing.T) {
		t.Parallel()
		ts := newOverrideServer(t, nil, func(c *server.Config) { c.AuthToken, c.LoopbackListener = "us3r", false })
		if code, _ := do(t, ts, "PUT", "/v1/overrides", acme); code != 401 {
			t.Errorf("no token: %d", code)
		}
		if code, _ := do(t, ts, "GET", "/v1/overrides?limit=tenant_api", ""); code != 401 {
			t.Errorf("GET without the token: %d", code)
		}
		if code, b := do(t, ts, "PUT", "/v1/overrides", acme, bearer("us3r")...); code != 200 {
			t.Errorf("auth token: %d %v", code, b)
		}
	})
	t.Run("no token", func(t *testing.T) {
		t.Parallel()
		open := newOverrideServer(t, nil, nil) // LoopbackListener
		if code, b := do(t, open, "PUT", "/v1/overrides", acme); code != 200 {
			t.Errorf("loopback: %d %v", code, b)
		}
		wide := newOverrideServer(t, nil, func(c *server.Config) { c.LoopbackListener = false })
		for _, m := range []string{"PUT", "DELETE"} {
			code, b := do(t, wide, m, "/v1/overrides", acme)
			if msg, _ := b["error"].(string); code != 403 || b["code"] != "forbidden" || !strings.Contains(msg, "--admin-token-file") {
				t.Errorf("%s beyond loopback: %d %v", m, code, b)
			}
		}
		if code, b := do(t, wide, "GET", "/v1/overrides?limit=tenant_api", ""); code != 200 {
			t.Errorf("reads stay open: %d %v", code, b)
		}
		if code, l := do(t, wide, "GET", "/v1/overrides?limit=tenant_api", ""); code != 200 || len(l["overrides"].([]any)) != 1 {
			t.Errorf("a refused write changed something: %v", l)
		}
	})
}

// Two servers on one store (two instances): a change through one applies
// on the other at its next sync, and an expired override stops applying
// at its expiry on both.
func TestOverridesSharedAndExpiry(t *testing.T) {
	t.Parallel()
	ms, err := overrides.NewMemStore(overrides.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := newOverrideServer(t, ms, nil)
	b := newOverrideServer(t, ms, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.srv.SyncOverrides(ctx, 50*time.Millisecond)
	if code, o := do(t, a, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "t1"}, "capacity": 7, "ttl_s": 1}`); code != 200 {
		t.Fatalf("PUT: %d %v", code, o)
	}
	resolve := func(s *ovServer) string {
		_, r := do(t, s, "GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant=t1", "")
		return r["source"].(string)
	}
	if got := resolve(a); got != "override" {
		t.Fatalf("on A at once: %s", got)
	}
	deadline := time.Now().Add(time.Second)
	for resolve(b) != "override" {
		if time.Now().After(deadline) {
			t.Fatal("B did not see A's override within 1 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Expiry: 1 s after it was set, on both, whether swept or not.
	time.Sleep(time.Until(deadline.Add(50 * time.Millisecond)))
	for _, s := range []*ovServer{a, b} {
		if got := resolve(s); got != "policy_limit" {
			t.Fatalf("after ttl_s: %s", got)
		}
		if _, l := do(t, s, "GET", "/v1/overrides?limit=tenant_api", ""); len(l["overrides"].([]any)) != 1 {
			t.Fatalf("expired override listed: %v", l)
		}
	}
	// A delete through B leaves A at its next sync.
	do(t, b, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "t2"}, "capacity": 7}`)
	if err := a.srv.SyncOverridesNow(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _ := do(t, b, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "t2"}}`); code != 200 {
		t.Fatalf("delete on B: %d", code)
	}
	if err := a.srv.SyncOverridesNow(ctx); err != nil {
		t.Fatal(err)
	}
	if n := a.set.Count("tenant_api"); n != 1 {
		t.Fatalf("A holds %d overrides of tenant_api, want the policy file's alone", n)
	}
}

// A store that fails answers store_error, changing nothing.
func TestOverridesStoreClosed(t *testing.T) {
	t.Parallel()
	ms, err := overrides.NewMemStore(overrides.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := newOverrideServer(t, ms, nil)
	ms.Close()
	if code, b := do(t, ts, "PUT", "/v1/overrides", acme); code != 503 || b["code"] != "store_error" {
		t.Fatalf("PUT on a closed store: %d %v", code, b)
	}
	// The loop ends when its store is closed.
	done := make(chan struct{})
	go func() { ts.srv.SyncOverrides(context.Background(), time.Millisecond); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("SyncOverrides kept running on a closed store")
	}
}
