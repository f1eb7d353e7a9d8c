package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// readyz is GET /readyz: the status code and the decoded body.
func readyz(t *testing.T, p *proc) (int, map[string]any) {
	t.Helper()
	code, body := call(t, p, "GET", "/readyz", "")
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("/readyz %d: not JSON: %q", code, body)
	}
	return code, m
}

// wantReady checks /readyz's status code and body fields (modes as a list).
func wantReady(t *testing.T, what string, p *proc, code int, fields map[string]any) {
	t.Helper()
	got, m := readyz(t, p)
	if got != code {
		t.Fatalf("%s: /readyz %d %v, want %d", what, got, m, code)
	}
	for k, v := range fields {
		if !reflect.DeepEqual(m[k], v) {
			t.Fatalf("%s: /readyz %s = %#v, want %#v (body %v)", what, k, m[k], v, m)
		}
	}
}

// With Redis unreachable, /readyz stays 200 ("degraded") while every limit
// in force can still be answered by its on_store_error, and answers 503
// when a limit in force fails closed (by the flag or its own
// on_store_error) or under --ready-requires-store. It follows the policy
// reloaded by SIGHUP, and returns to "ready" once Redis answers.
func TestServeRedisReadyzFollowsModes(t *testing.T) {
	srv := startRedis(t)
	dir := t.TempDir()
	base := "limits:\n  - name: g\n    key: \"t:{t}\"\n    capacity: 20\n    refill_per_second: 1\n"
	plain := filepath.Join(dir, "plain.yaml")
	writePolicy(t, plain, base)
	overridden := filepath.Join(dir, "overridden.yaml")
	writePolicy(t, overridden, base+"    on_store_error: fail_open\n")
	reloaded := filepath.Join(dir, "reloaded.yaml")
	writePolicy(t, reloaded, base)
	store := []string{"--store", "redis://" + srv.Addr, "--store-timeout", "200ms", "--reload", "0"}
	open := serve(t, append([]string{"--config", reloaded}, store...)...)
	strict := serve(t, append([]string{"--config", plain, "--ready-requires-store"}, store...)...)
	closed := serve(t, append([]string{"--config", plain, "--on-store-error", "fail_closed"}, store...)...)
	closedButOverridden := serve(t, append([]string{"--config", overridden, "--on-store-error", "fail_closed"}, store...)...)
	for _, p := range []*proc{open, strict, closed, closedButOverridden} {
		wantReady(t, "Redis up", p, 200, map[string]any{"status": "ready", "store": "reachable"})
	}

	srv.Kill()
	degraded := func(mode string, modes ...any) map[string]any {
		return map[string]any{"status": "degraded", "store": "unreachable", "mode": mode, "modes": modes}
	}
	wantReady(t, "fail_open", open, 200, degraded("fail_open", "fail_open"))
	if code, body := call(t, open, "POST", "/v1/check", `{"descriptors":{"t":"x"}}`); code != 200 {
		t.Fatalf("fail_open with Redis down: %d %s", code, body)
	}
	wantReady(t, "--ready-requires-store", strict, 503, map[string]any{"status": "unavailable", "code": "store_unreachable"})
	wantReady(t, "fail_closed", closed, 503, map[string]any{"status": "unavailable", "store": "unreachable", "mode": "fail_closed"})
	wantReady(t, "fail_closed overridden by every limit", closedButOverridden, 200, degraded("fail_closed", "fail_open"))

	// The policy in force decides: a limit of its own mode is listed; a
	// fail_closed limit makes the instance unready; removing it, ready again.
	reload := func(src string) {
		t.Helper()
		writePolicy(t, reloaded, src)
		open.cmd.Process.Signal(syscall.SIGHUP)
		deadline := time.Now().Add(10 * time.Second)
		for !open.logged(`"msg":"policy reloaded","reason":"SIGHUP","policy_version":"` + policyVersion(t, src) + `"`) {
			if time.Now().After(deadline) {
				t.Fatalf("policy not reloaded:\n%s", open.text())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	local := base + "  - name: l\n    key: \"l:{t}\"\n    capacity: 5\n    refill_per_second: 1\n    on_store_error: local\n"
	reload(local)
	wantReady(t, "a local limit added", open, 200, degraded("fail_open", "fail_open", "local"))
	reload(local + "  - name: c\n    key: \"c:{t}\"\n    capacity: 5\n    refill_per_second: 1\n    on_store_error: fail_closed\n")
	wantReady(t, "a fail_closed limit added", open, 503, map[string]any{"status": "unavailable", "modes": []any{"fail_closed", "fail_open", "local"}})
	reload(base)
	wantReady(t, "the fail_closed limit removed", open, 200, degraded("fail_open", "fail_open"))

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{open, strict, closed, closedButOverridden} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, m := readyz(t, p)
			if code == 200 && m["status"] == "ready" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz after Redis restarted: %d %v", code, m)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
