package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The policy file as the argument or with --config: exactly one of them.
func TestCheckPolicyArgument(t *testing.T) {
	const pol = "../../examples/sluice.yaml"
	for _, args := range [][]string{{"check", pol}, {"check", "--config", pol}} {
		if code, out, errOut := runCmd(t, "", args...); code != 0 || !strings.Contains(out, "sluice.yaml: 5 limits, 2 cost rules") {
			t.Errorf("%v: %d %q %q", args, code, out, errOut)
		}
	}
	if code, out, errOut := runCmd(t, "", "check", pol, "--config", pol); code != 2 || out != "" || !strings.Contains(errOut, "sluice: check: validates one thing at a time; got the argument ") {
		t.Errorf("both: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCmd(t, "", "check"); code != 2 || out != "" || !strings.Contains(errOut, "sluice: check: nothing to validate: give a policy file (sluice check FILE, or --config FILE)") {
		t.Errorf("neither: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "", "check", pol, "--envoy-config", "../../envoyrls/testdata/config"); code != 2 || !strings.Contains(errOut, "one thing at a time") {
		t.Errorf("a policy and --envoy-config: %d %q", code, errOut)
	}
	t.Setenv("SLUICE_CHECK_CONFIG", pol)
	if code, _, errOut := runCmd(t, "", "check", pol); code != 2 || !strings.Contains(errOut, "$SLUICE_CHECK_CONFIG") {
		t.Errorf("the argument with SLUICE_CHECK_CONFIG set: %d %q", code, errOut)
	}
}

func TestCheckEnvoyConfig(t *testing.T) {
	code, out, errOut := runCmd(t, "", "check", "--envoy-config", "../../envoyrls/testdata/config")
	if code != 0 || !strings.Contains(out, "config: 2 domains (edge, mongo_cps), 8 rate limits: OK") {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "", "check", "--envoy-config", dir); code != 1 || out != "" || !strings.Contains(errOut, "edge.yaml: line 4") || !strings.Contains(errOut, "fortnight") {
		t.Fatalf("bad envoy config: %d %q %q", code, out, errOut)
	}
	empty := t.TempDir()
	if code, _, errOut := runCmd(t, "", "check", "--envoy-config", empty); code != 1 || errOut != "sluice: no *.yaml or *.yml file in "+empty+"\n" {
		t.Fatalf("empty dir: %d %q", code, errOut)
	}
}

// What is wrong with --envoy-config's directory itself names the flag.
func TestCheckEnvoyConfigNotADirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexist")
	if code, out, errOut := runCmd(t, "", "check", "--envoy-config", missing); code != 1 || out != "" || errOut != "sluice: --envoy-config "+missing+": no such directory\n" {
		t.Errorf("missing: %d %q %q", code, out, errOut)
	}
	const file = "../../envoyrls/testdata/config/edge.yaml"
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "", "check", "--envoy-config", file); code != 1 || out != "" || errOut != "sluice: --envoy-config "+abs+": is a file, not a directory\n" {
		t.Errorf("a file: %d %q %q", code, out, errOut)
	}
}

// Counts read as English: 1 limit, 2 limits, 1 domain.
func TestCheckPluralises(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("limits:\n  - name: one\n    key: k\n    capacity: 1\n    refill_per_second: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "", "check", pol); code != 0 || !strings.HasPrefix(out, pol+": 1 limit, 0 cost rules, version ") {
		t.Errorf("policy: %d %q %q", code, out, errOut)
	}
	env := filepath.Join(dir, "envoy")
	if err := os.Mkdir(env, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env, "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "", "check", "--envoy-config", env); code != 0 || out != env+": 1 domain (d), 1 rate limit: OK\n" {
		t.Errorf("envoy: %d %q %q", code, out, errOut)
	}
}

// A directory given as the policy: the read error and where Envoy's
// directories go.
func TestCheckDirectoryAsPolicyHints(t *testing.T) {
	dir := t.TempDir()
	want := "(a directory: for Envoy ratelimit config use --envoy-config " + dir + ")"
	if code, out, errOut := runCmd(t, "", "check", dir); code != 1 || out != "" || !strings.Contains(errOut, "is a directory "+want) {
		t.Errorf("%d %q %q", code, out, errOut)
	}
}

// An Envoy file checked as a policy: the policy's errors and a hint.
func TestCheckEnvoyFileAsPolicyHints(t *testing.T) {
	const envoyFile = "../../envoyrls/testdata/config/edge.yaml"
	abs, err := filepath.Abs(filepath.Dir(envoyFile))
	if err != nil {
		t.Fatal(err)
	}
	hint := "this looks like an Envoy ratelimit config: use --envoy-config " + abs
	for _, args := range [][]string{{"check", envoyFile}, {"check", "--config", envoyFile}} {
		if code, _, errOut := runCmd(t, "", args...); code != 1 || !strings.Contains(errOut, `field "domain": unknown field`) || !strings.Contains(errOut, hint) {
			t.Errorf("%v: %d %q", args, code, errOut)
		}
	}
	other := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(other, []byte("limitz: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCmd(t, "", "check", other); code != 1 || !strings.Contains(errOut, `field "limitz": unknown field`) || strings.Contains(errOut, "Envoy") {
		t.Errorf("another unknown field: %d %q", code, errOut)
	}
}
