package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDemoShowsVectors(t *testing.T) {
	code, out, errOut := runCmd(t, "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"request 4              allowed=false remaining=0 retry_after=500ms",
		"request 6              allowed=true",
		"cost 20                allowed=false remaining=12 retry_after=4s",
		"cost 101: sluice: cost 101 exceeds capacity 100",
		"fixed window admits 20, sliding window admits 10",
		"token bucket B=3, r=2/s (docs/behaviour.md section 1, vector 1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestUnknownCommandAndVersion(t *testing.T) {
	if code, _, errOut := runCmd(t, "", "nope"); code != 2 || !strings.Contains(errOut, "unexpected argument nope") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := runCmd(t, "", "version"); code != 0 || out != "sluice "+versionString()+"\n" {
		t.Fatalf("version: %d %q", code, out)
	}
}

func TestCheck(t *testing.T) {
	if code, out, _ := runCmd(t, "", "check", "--config", "../../examples/sluice.yaml"); code != 0 || !strings.Contains(out, "5 limits, 2 cost rules") {
		t.Fatalf("%d %q", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: 1\n"), 0o644)
	if code, _, errOut := runCmd(t, "", "check", "--config", bad); code != 1 || !strings.Contains(errOut, `line 4, column 15: limit "a": field "capacity"`) {
		t.Fatalf("%d %q", code, errOut)
	}
	t.Setenv("SLUICE_CHECK_CONFIG", "../../examples/sluice.yaml")
	if code, _, errOut := runCmd(t, "", "check"); code != 0 {
		t.Fatalf("from the environment: %d %q", code, errOut)
	}
}

func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "pulse.jsonl")
	if code, _, errOut := runCmd(t, "", "simulate", "--generate", "pulse", "--n", "100", "--max-wait", "10s", "--descriptor", "tenant=acme", "--out", trace); code != 0 {
		t.Fatalf("generate: %d %s", code, errOut)
	}
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("limits:\n  - name: t\n    key: \"tenant:{tenant}\"\n    capacity: 20\n    refill_per_second: 50\n"), 0o644)
	plot := filepath.Join(dir, "p.png")
	code, out, errOut := runCmd(t, "", "simulate", "--config", pol, "--trace", trace, "--plot", plot, "--compare", "token_bucket,fixed_window")
	if code != 0 {
		t.Fatalf("simulate: %d %s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n != 200 || !strings.Contains(out, `"algorithm":"fixed_window"`) || !strings.Contains(out, `"retry_after_ms"`) {
		t.Fatalf("%d lines:\n%.300s", n, out)
	}
	if !strings.Contains(errOut, "token_bucket: offered 100, admitted 100, rejected 0, peak admitted") {
		t.Fatalf("summary %q", errOut)
	}
	if st, err := os.Stat(plot); err != nil || st.Size() < 1000 {
		t.Fatalf("plot: %v", err)
	}
	// A bad trace stops with the line number and writes nothing.
	badTrace := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(badTrace, []byte("{\"t\": 1}\n{\"t\": 0}\n"), 0o644)
	outFile := filepath.Join(dir, "out.jsonl")
	code, out, errOut = runCmd(t, "", "simulate", "--config", pol, "--trace", badTrace, "--out", outFile, "--plot", filepath.Join(dir, "bad.png"))
	if code != 1 || !strings.Contains(errOut, "trace line 2: t 0 goes back in time") || out != "" {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	for _, f := range []string{outFile, filepath.Join(dir, "bad.png")} {
		if _, err := os.Stat(f); err == nil {
			t.Fatalf("%s was written", f)
		}
	}
	if code, _, errOut := runCmd(t, "{\"t\": 0}\n", "simulate", "--config", pol, "--trace", "-", "--compare", "leaky"); code != 2 || !strings.Contains(errOut, `unknown algorithm "leaky"`) {
		t.Fatalf("%d %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "", "simulate", "--generate", "wave"); code != 2 || !strings.Contains(errOut, "--generate") {
		t.Fatalf("%d %q", code, errOut)
	}
}
