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
	if code, out, errOut := runCmd(t, "", "check", pol, "--config", pol); code != 1 || out != "" || !strings.Contains(errOut, "check validates one thing at a time; got the argument ") {
		t.Errorf("both: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCmd(t, "", "check"); code != 1 || out != "" || !strings.Contains(errOut, "sluice check FILE, or --config FILE") {
		t.Errorf("neither: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "", "check", pol, "--envoy-config", "../../envoyrls/testdata/config"); code != 1 || !strings.Contains(errOut, "one thing at a time") {
		t.Errorf("a policy and --envoy-config: %d %q", code, errOut)
	}
	t.Setenv("SLUICE_CHECK_CONFIG", pol)
	if code, _, errOut := runCmd(t, "", "check", pol); code != 1 || !strings.Contains(errOut, "$SLUICE_CHECK_CONFIG") {
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
	if code, _, errOut := runCmd(t, "", "check", "--envoy-config", t.TempDir()); code != 1 || !strings.Contains(errOut, "no *.yaml file") {
		t.Fatalf("empty dir: %d %q", code, errOut)
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
