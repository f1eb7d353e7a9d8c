package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A reload that adds priority classes to a sluice serve started without:
// sluice_decisions_total keeps its series without the priority label
// before, and has the label on every series after (the decisions before
// the reload in priority ""), without a restart.
func TestServeReloadAddsPriorityLabel(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	src := "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 100\n    refill_per_second: 1\n"
	writePolicy(t, pol, src)
	p := serve(t, "--config", pol, "--reload", "100ms")
	check := func(body string) {
		t.Helper()
		if code, out := call(t, p, "POST", "/v1/check", body); code != 200 {
			t.Fatalf("check %s: %d %s", body, code, out)
		}
	}
	metrics := func() string {
		t.Helper()
		code, out := call(t, p, "GET", "/metrics", "")
		if code != 200 {
			t.Fatalf("metrics: %d", code)
		}
		return out
	}
	check(`{"descriptors": {"tenant": "acme"}}`)
	check(`{"descriptors": {"tenant": "acme"}}`)
	if m := metrics(); !strings.Contains(m, `sluice_decisions_total{attempt="original",limit="tenant_api",result="admitted"} 2`) || strings.Contains(m, `priority=`) {
		t.Fatalf("before classes: %s", grepLines(m, "sluice_decisions_total"))
	}
	writePolicy(t, pol, "priorities:\n  - name: interactive\n  - name: batch\n    reserve: 0.5\n    max_queue_ms: 0\n"+src)
	p.waitLog(t, "policy reloaded")
	check(`{"descriptors": {"tenant": "acme"}, "priority": "batch"}`)
	check(`{"descriptors": {"tenant": "acme"}}`)
	m := metrics()
	for _, want := range []string{
		`sluice_decisions_total{attempt="original",limit="tenant_api",priority="",result="admitted"} 3`,
		`sluice_decisions_total{attempt="original",limit="tenant_api",priority="batch",result="admitted"} 1`,
		`sluice_decisions_total{attempt="original",limit="tenant_api",priority="interactive",result="admitted"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("after the reload: no %s in\n%s", want, grepLines(m, "sluice_decisions_total"))
		}
	}
	if strings.Contains(m, `sluice_decisions_total{attempt="original",limit="tenant_api",result=`) {
		t.Errorf("after the reload: a series without the priority label:\n%s", grepLines(m, "sluice_decisions_total"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
