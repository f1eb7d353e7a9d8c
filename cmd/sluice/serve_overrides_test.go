// Black-box tests of sluice serve's overrides: the flags, --state-dir over
// a restart, a corrupt state file, the policy file's overrides and their
// reload, TTL expiry, who may write, and two instances on one Redis.

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

const ovServePolicy = `limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 1
overrides:
  - name: tenant_api
    match: {tenant: vip}
    capacity: 1000
`

// listed returns the tenants of limit tenant_api's overrides on p, each
// with its source ("acme=api").
func listed(t *testing.T, p *proc, hdr ...string) string {
	t.Helper()
	code, body := call(t, p, "GET", "/v1/overrides?limit=tenant_api", "", hdr...)
	if code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	var l struct {
		Overrides []struct {
			Match  map[string]string `json:"match"`
			Source string            `json:"source"`
		} `json:"overrides"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range l.Overrides {
		out = append(out, o.Match["tenant"]+"="+o.Source)
	}
	return strings.Join(out, " ")
}

// stop sends SIGTERM to p and waits for it to exit 0.
func stop(t *testing.T, p *proc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit")
	}
}

func putAcme(t *testing.T, p *proc, extra string, hdr ...string) (int, string) {
	t.Helper()
	return call(t, p, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}, "capacity": 500`+extra+`}`, hdr...)
}

// --state-dir keeps the API's overrides over a restart; the policy file's
// are listed with source policy and cannot be changed; every change is an
// audit record.
func TestServeOverridesStateDir(t *testing.T) {
	dir := t.TempDir()
	pol, state := filepath.Join(dir, "p.yaml"), filepath.Join(dir, "state")
	writePolicy(t, pol, ovServePolicy)
	p := serve(t, "--config", pol, "--state-dir", state)
	if code, body := putAcme(t, p, `, "note": "trial"`); code != 200 || !strings.Contains(body, `"source":"api"`) {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if code, body := call(t, p, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "vip"}, "capacity": 5}`); code != 409 || !strings.Contains(body, `"code":"policy_override"`) {
		t.Fatalf("PUT of the policy's: %d %s", code, body)
	}
	if code, body := call(t, p, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "vip"}}`); code != 409 {
		t.Fatalf("DELETE of the policy's: %d %s", code, body)
	}
	if got := listed(t, p); got != "acme=api vip=policy" {
		t.Fatalf("listed %s", got)
	}
	p.waitLog(t, `"audit":true`)
	if !p.logged(`"action":"set"`) || !p.logged(`"remote_addr":"127.0.0.1:`) {
		t.Fatal("no audit record of the set")
	}
	if _, err := os.Stat(filepath.Join(state, "overrides.json")); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, p, "GET", "/metrics", ""); code != 200 || !strings.Contains(body, `sluice_overrides{limit="tenant_api"} 2`) {
		t.Fatalf("metrics: %d %.400s", code, body)
	}
	stop(t, p)

	q := serve(t, "--config", pol, "--state-dir", state)
	if got := listed(t, q); got != "acme=api vip=policy" {
		t.Fatalf("after a restart: %s", got)
	}
	code, body := call(t, q, "GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant=acme", "")
	if code != 200 || !strings.Contains(body, `"source":"override"`) || !strings.Contains(body, `"note":"trial"`) {
		t.Fatalf("resolve after a restart: %d %s", code, body)
	}
	if code, body := call(t, q, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}}`); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	stop(t, q)
	r := serve(t, "--config", pol, "--state-dir", state)
	if got := listed(t, r); got != "vip=policy" {
		t.Fatalf("after a delete and a restart: %s", got)
	}
}

// A state file that cannot be read stops the start (exit 1, naming it);
// the overrides' flags are checked before anything starts (exit 2).
func TestServeOverridesBadStart(t *testing.T) {
	dir := t.TempDir()
	pol, state := filepath.Join(dir, "p.yaml"), filepath.Join(dir, "state")
	writePolicy(t, pol, ovServePolicy)
	os.MkdirAll(state, 0o755)
	os.WriteFile(filepath.Join(state, "overrides.json"), []byte("{\"format\": \"sluice-overrides/1\"\nnot json\n"), 0o644)
	cmd := exec.Command(binary, "serve", "--config", pol, "--http", "127.0.0.1:0", "--state-dir", state)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--state-dir") ||
		!strings.Contains(string(out), "overrides.json") || strings.Contains(string(out), "sluice serving") {
		t.Fatalf("corrupt state file: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-overrides", "0"}, "--max-overrides 0"},
		{[]string{"--state-dir", state, "--store", "redis://127.0.0.1:1"}, "--state-dir"},
	} {
		cmd := exec.Command(binary, append([]string{"serve", "--config", pol, "--http", "127.0.0.1:0"}, c.args...)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v\n%s", c.args, err, out)
		}
	}
	// A bad overrides list stops the start like any policy error, and
	// sluice check reports it.
	bad := filepath.Join(dir, "bad.yaml")
	writePolicy(t, bad, strings.Replace(ovServePolicy, "capacity: 1000", "limit: 1000", 1))
	out, err = exec.Command(binary, "serve", "--config", bad, "--http", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `field "limit"`) {
		t.Fatalf("bad overrides list at start: %v %s", err, out)
	}
	if code, _, errOut := runCmd(t, "", "check", bad); code != 1 || !strings.Contains(errOut, `line 9`) || !strings.Contains(errOut, `field "limit"`) {
		t.Fatalf("check of a bad overrides list: %d %s", code, errOut)
	}
	if code, out, errOut := runCmd(t, "", "check", pol); code != 0 || !strings.Contains(out, "1 override,") {
		t.Fatalf("check: %d %q %q", code, out, errOut)
	}
}

// A reload replaces the policy file's overrides (the API's stay); a bad
// overrides list is rejected like any policy error, the old ones staying.
func TestServeOverridesReload(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	p := serve(t, "--config", pol, "--reload", "100ms")
	if code, body := putAcme(t, p, ""); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	writePolicy(t, pol, strings.Replace(ovServePolicy, "tenant: vip", "tenant: gold", 1))
	p.waitLog(t, "policy reloaded")
	if got := listed(t, p); got != "acme=api gold=policy" {
		t.Fatalf("after the reload: %s", got)
	}
	writePolicy(t, pol, strings.Replace(ovServePolicy, "match: {tenant: vip}", "match: {user: vip}", 1))
	p.waitLog(t, "policy reload rejected")
	if !p.logged(`does not use descriptor`) {
		t.Fatal("the rejection does not say why")
	}
	if got := listed(t, p); got != "acme=api gold=policy" {
		t.Fatalf("after a rejected reload: %s", got)
	}
}

// An override with ttl_s stops applying at its expiry, and is no longer
// listed within 1 s.
func TestServeOverridesTTL(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	p := serve(t, "--config", pol)
	code, body := putAcme(t, p, `, "ttl_s": 1`)
	if code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	var o struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	json.Unmarshal([]byte(body), &o)
	if got := listed(t, p); got != "acme=api vip=policy" {
		t.Fatalf("listed %s", got)
	}
	time.Sleep(time.Until(o.ExpiresAt) + 20*time.Millisecond)
	if _, body := call(t, p, "GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant=acme", ""); !strings.Contains(body, `"source":"policy_limit"`) {
		t.Fatalf("resolve after expiry: %s", body)
	}
	if got := listed(t, p); got != "vip=policy" {
		t.Fatalf("listed after expiry: %s", got)
	}
	// Swept within about a second: the gauge counts the policy's alone.
	deadline := time.Now().Add(1500 * time.Millisecond)
	for {
		_, m := call(t, p, "GET", "/metrics", "")
		if strings.Contains(m, `sluice_overrides{limit="tenant_api"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired override was not swept")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// --admin-token-file guards /v1/overrides (every method; the auth token
// does not do there) while checks keep --auth-token-file; without any
// token only a loopback listener accepts writes.
func TestServeOverridesAdminToken(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	adm, usr := filepath.Join(dir, "admin"), filepath.Join(dir, "user")
	os.WriteFile(adm, []byte("adm1n\n"), 0o600)
	os.WriteFile(usr, []byte("us3r\n"), 0o600)
	p := serve(t, "--config", pol, "--admin-token-file", adm, "--auth-token-file", usr)
	for _, c := range []struct {
		tok    string
		status int
	}{{"", 401}, {"us3r", 401}, {"wrong", 401}, {"adm1n", 200}} {
		var hdr []string
		if c.tok != "" {
			hdr = []string{"Authorization", "Bearer " + c.tok}
		}
		if code, body := putAcme(t, p, "", hdr...); code != c.status {
			t.Errorf("PUT with %q: %d %s", c.tok, code, body)
		}
		if code, _ := call(t, p, "GET", "/v1/overrides?limit=tenant_api", "", hdr...); code != c.status {
			t.Errorf("GET with %q: %d", c.tok, code)
		}
	}
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "a"}}`, "Authorization", "Bearer us3r"); code != 200 {
		t.Errorf("check with the auth token: %d", code)
	}
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "a"}}`, "Authorization", "Bearer adm1n"); code != 401 {
		t.Errorf("check with the admin token: %d", code)
	}
	// Its environment variable.
	cmd := exec.Command(binary, "serve", "--config", pol, "--http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_TOKEN_FILE="+filepath.Join(dir, "missing"))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--admin-token-file") {
		t.Fatalf("SLUICE_ADMIN_TOKEN_FILE: %v %s", err, out)
	}

	// No token, a listener on every interface: writes refused, reads open.
	wide := serve(t, "--config", pol, "--http", "0.0.0.0:0")
	code, body := putAcme(t, wide, "")
	if code != 403 || !strings.Contains(body, `"code":"forbidden"`) || !strings.Contains(body, "--admin-token-file") {
		t.Fatalf("write beyond loopback: %d %s", code, body)
	}
	if code, _ := call(t, wide, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "vip"}}`); code != 403 {
		t.Fatalf("delete beyond loopback: %d", code)
	}
	if got := listed(t, wide); got != "vip=policy" {
		t.Fatalf("reads beyond loopback: %s", got)
	}
	// A loopback listener accepts them (serve's default --http is
	// 127.0.0.1).
	local := serve(t, "--config", pol)
	if code, body := putAcme(t, local, ""); code != 200 {
		t.Fatalf("write on loopback: %d %s", code, body)
	}
	// --max-overrides caps the API's overrides.
	capped := serve(t, "--config", pol, "--max-overrides", "1")
	putAcme(t, capped, "")
	if code, body := call(t, capped, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "b"}, "capacity": 5}`); code != 422 || !strings.Contains(body, "too_many_overrides") {
		t.Fatalf("over --max-overrides: %d %s", code, body)
	}
}

// The limiter decides by the overrides: a raised capacity admits more, a
// deny refuses (403 denied), a delete gives the policy back.
func TestServeOverridesDecide(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	p := serve(t, "--config", pol)
	check := func(tenant string) (int, string) {
		return call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "`+tenant+`"}, "cost": 10}`)
	}
	if code, body := check("small"); code != 200 {
		t.Fatalf("first: %d %s", code, body)
	}
	if code, _ := check("small"); code != 429 {
		t.Fatalf("the policy's capacity 10: %d", code)
	}
	if code, body := putAcme(t, p, ""); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	for i := range 50 { // 500 = 50 checks of 10
		if code, body := check("acme"); code != 200 {
			t.Fatalf("check %d under capacity 500: %d %s", i, code, body)
		}
	}
	if code, _ := check("acme"); code != 429 {
		t.Fatalf("over the override's capacity: %d", code)
	}
	if code, body := call(t, p, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "mallory"}, "deny": true}`); code != 200 {
		t.Fatalf("PUT deny: %d %s", code, body)
	}
	if code, body := check("mallory"); code != 403 || !strings.Contains(body, `"code":"denied"`) {
		t.Fatalf("denied: %d %s", code, body)
	}
	call(t, p, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "mallory"}}`)
	if code, body := check("mallory"); code != 200 {
		t.Fatalf("after the delete: %d %s", code, body)
	}
}

// Two instances on one Redis: a set through A is listed and resolved on B
// within 200 ms (announced: a few ms), a delete through B leaves A as
// soon, and the overrides survive a restart of both.
func TestServeRedisOverridesShared(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	store := "redis://" + srv.Addr
	a := serve(t, "--config", pol, "--store", store)
	b := serve(t, "--config", pol, "--store", store)
	if code, body := putAcme(t, a, ""); code != 200 {
		t.Fatalf("PUT on A: %d %s", code, body)
	}
	set := time.Now()
	for listed(t, b) != "acme=api vip=policy" {
		// Announced: the message's delivery and one Redis call.
		if time.Since(set) > 200*time.Millisecond {
			t.Fatalf("B did not list A's override after %v: %s", time.Since(set), listed(t, b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("listed on B %v after the set on A", time.Since(set).Round(time.Millisecond))
	if _, body := call(t, b, "GET", "/v1/overrides/resolve?limit=tenant_api&descriptors.tenant=acme", ""); !strings.Contains(body, `"capacity":500`) {
		t.Fatalf("resolve on B: %s", body)
	}
	// A deny set through A refuses on B within 200 ms.
	if code, body := call(t, a, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "mallory"}, "deny": true}`); code != 200 {
		t.Fatalf("PUT deny on A: %d %s", code, body)
	}
	set = time.Now()
	for {
		code, _ := call(t, b, "POST", "/v1/check", `{"descriptors": {"tenant": "mallory"}, "cost": 0}`)
		if code == 403 {
			break
		}
		if time.Since(set) > 200*time.Millisecond {
			t.Fatalf("B did not enforce A's deny within 200 ms: %d", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("deny enforced on B %v after the set on A", time.Since(set).Round(time.Millisecond))
	call(t, a, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "mallory"}}`)
	if code, body := call(t, b, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "beta"}, "capacity": 7}`); code != 200 {
		t.Fatalf("PUT on B: %d %s", code, body)
	}
	stop(t, a)
	stop(t, b)
	a = serve(t, "--config", pol, "--store", store)
	b = serve(t, "--config", pol, "--store", store)
	for _, p := range []*proc{a, b} {
		if got := listed(t, p); got != "acme=api beta=api vip=policy" {
			t.Fatalf("after restarting both: %s", got)
		}
	}
	if code, body := call(t, b, "DELETE", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}}`); code != 200 {
		t.Fatalf("DELETE on B: %d %s", code, body)
	}
	deleted := time.Now()
	for listed(t, a) != "beta=api vip=policy" {
		if time.Since(deleted) > 200*time.Millisecond {
			t.Fatalf("A still lists the override deleted on B: %s", listed(t, a))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two instances on a 3-master Redis Cluster: a set through A is listed on
// B within 200 ms, and survives a restart of both.
func TestServeRedisClusterOverrides(t *testing.T) {
	cl := redistest.NewCluster(t, 3)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	store := "redis+cluster://" + strings.Join(cl.Addrs(), ",")
	a := serve(t, "--config", pol, "--store", store)
	b := serve(t, "--config", pol, "--store", store)
	if code, body := putAcme(t, a, ""); code != 200 {
		t.Fatalf("PUT on A: %d %s", code, body)
	}
	set := time.Now()
	for listed(t, b) != "acme=api vip=policy" {
		if time.Since(set) > 200*time.Millisecond {
			t.Fatalf("B did not list A's override within 200 ms: %s", listed(t, b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("listed on B %v after the set on A", time.Since(set).Round(time.Millisecond))
	stop(t, a)
	stop(t, b)
	for _, p := range []*proc{serve(t, "--config", pol, "--store", store), serve(t, "--config", pol, "--store", store)} {
		if got := listed(t, p); got != "acme=api vip=policy" {
			t.Fatalf("after restarting both: %s", got)
		}
	}
}
