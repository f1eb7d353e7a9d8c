package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// checkServer is a loopback stand-in for POST /v1/check that admits every
// request; it counts them.
func checkServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.Write([]byte(`{"allowed": true}`))
	}))
	t.Cleanup(ts.Close)
	return ts, &n
}

// unsetenv unsets name for the rest of the test (kong reads a variable set
// to "" as the value "", which a path flag takes for the working directory).
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // restores the old value after the test
	os.Unsetenv(name)
}

// serve's variables are SLUICE_<FLAG>; they must not reach another command
// whose flag has the same name.
func TestEnvServeVarsDoNotReachOtherCommands(t *testing.T) {
	ts, n := checkServer(t)
	t.Setenv("SLUICE_GRPC", "127.0.0.1:1") // serve's --grpc ADDR; bench's --grpc is a bool
	t.Setenv("SLUICE_MAX_WAIT", "10s")
	t.Setenv("SLUICE_CONFIG", "../../examples/sluice.yaml")
	t.Setenv("SLUICE_DURATION", "1ns") // simulate's and bench's --duration
	code, out, errOut := runCmd(t, "", "bench", "--target", ts.URL, "--requests", "5", "--concurrency", "1", "--duration", "30s")
	if code != 0 || !strings.Contains(out, "admitted 5,") || n.Load() != 5 {
		t.Errorf("bench with SLUICE_GRPC set: %d %q %q (%d requests served)", code, out, errOut, n.Load())
	}
	code, out, errOut = runCmd(t, "", "simulate", "--generate", "pulse", "--n", "3")
	if code != 0 || strings.Count(out, "\n") != 3 || strings.Contains(out, "max_wait_ms") {
		t.Errorf("simulate with SLUICE_MAX_WAIT=10s: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "", "check"); code == 0 || !strings.Contains(errOut, "--config") {
		t.Errorf("check with SLUICE_CONFIG set: %d %q", code, errOut)
	}
}

// Every other command reads SLUICE_<COMMAND>_<FLAG>.
func TestEnvPerCommandVars(t *testing.T) {
	t.Setenv("SLUICE_SIMULATE_MAX_WAIT", "10s")
	code, out, errOut := runCmd(t, "", "simulate", "--generate", "pulse", "--n", "2")
	if code != 0 || strings.Count(out, `"max_wait_ms":10000`) != 2 {
		t.Fatalf("SLUICE_SIMULATE_MAX_WAIT: %d %q %q", code, out, errOut)
	}

	ts, n := checkServer(t)
	t.Setenv("SLUICE_BENCH_REQUESTS", "7")
	t.Setenv("SLUICE_BENCH_CONCURRENCY", "1")
	code, out, errOut = runCmd(t, "", "bench", "--target", ts.URL, "--duration", "30s")
	if code != 0 || !strings.Contains(out, "requests 7: admitted 7,") || n.Load() != 7 {
		t.Fatalf("SLUICE_BENCH_REQUESTS: %d %q %q", code, out, errOut)
	}
	t.Setenv("SLUICE_BENCH_GRPC", "true")
	if code, _, errOut := runCmd(t, "", "bench", "--target", ts.URL); code != 2 || !strings.Contains(errOut, "want host:port with --grpc") {
		t.Fatalf("SLUICE_BENCH_GRPC: %d %q", code, errOut)
	}

	t.Setenv("SLUICE_CHECK_CONFIG", "../../examples/sluice.yaml")
	if code, out, errOut := runCmd(t, "", "check"); code != 0 || !strings.Contains(out, "5 limits") {
		t.Fatalf("SLUICE_CHECK_CONFIG: %d %q %q", code, out, errOut)
	}
	unsetenv(t, "SLUICE_CHECK_CONFIG")
	t.Setenv("SLUICE_CHECK_ENVOY_CONFIG", "../../envoyrls/testdata/config")
	if code, out, errOut := runCmd(t, "", "check"); code != 0 || !strings.Contains(out, "2 domains") {
		t.Fatalf("SLUICE_CHECK_ENVOY_CONFIG: %d %q %q", code, out, errOut)
	}
}

// serve keeps SLUICE_<FLAG>, and ignores the other commands' variables.
func TestEnvServeKeepsPlainNames(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("limits: [{name: a}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_CONFIG", bad)
	// Fails on the policy before it listens.
	if code, _, errOut := runCmd(t, "", "serve", "--http", "127.0.0.1:0"); code != 1 || !strings.Contains(errOut, `limit "a": field "key"`) {
		t.Fatalf("SLUICE_CONFIG: %d %q", code, errOut)
	}
	unsetenv(t, "SLUICE_CONFIG")
	t.Setenv("SLUICE_SIMULATE_CONFIG", bad)
	t.Setenv("SLUICE_CHECK_CONFIG", bad)
	// (A missing configuration is a usage error: exit 2.)
	if code, _, errOut := runCmd(t, "", "serve", "--http", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "serve needs --config") {
		t.Fatalf("serve read another command's variable: %d %q", code, errOut)
	}
}

func TestEnvNamesInHelp(t *testing.T) {
	for cmd, want := range map[string][]string{
		"serve":    {"($SLUICE_CONFIG)", "($SLUICE_HTTP)", "($SLUICE_GRPC)", "($SLUICE_MAX_WAIT)", "($SLUICE_STORE)"},
		"bench":    {"($SLUICE_BENCH_TARGET)", "($SLUICE_BENCH_GRPC)", "($SLUICE_BENCH_DURATION)"},
		"simulate": {"($SLUICE_SIMULATE_CONFIG)", "($SLUICE_SIMULATE_MAX_WAIT)", "($SLUICE_SIMULATE_DURATION)"},
		"check":    {"($SLUICE_CHECK_CONFIG)", "($SLUICE_CHECK_ENVOY_CONFIG)"},
	} {
		code, out, errOut := runCmd(t, "", cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: %d %q", cmd, code, errOut)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %s:\n%s", cmd, w, out)
			}
		}
	}
}

// Every flag of every command has exactly one variable, named after its
// command, and no two flags share one; the global flags have none.
func TestEnvEveryFlagNamedByItsCommand(t *testing.T) {
	var c cli
	k, err := newParser(&c, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range k.Model.Flags {
		if len(f.Envs) != 0 {
			t.Errorf("global flag --%s has variables %v", f.Name, f.Envs)
		}
	}
	seen := map[string]string{}
	for _, cmd := range k.Model.Children {
		prefix := "SLUICE_" + strings.ToUpper(cmd.Name) + "_"
		if cmd.Name == "serve" {
			prefix = "SLUICE_"
		}
		for _, f := range cmd.Flags {
			want := prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			if len(f.Envs) != 1 || f.Envs[0] != want {
				t.Errorf("%s --%s: variables %v, want [%s]", cmd.Name, f.Name, f.Envs, want)
				continue
			}
			if prev, dup := seen[want]; dup {
				t.Errorf("%s is both %s and %s --%s", want, prev, cmd.Name, f.Name)
			}
			seen[want] = cmd.Name + " --" + f.Name
		}
	}
	if len(seen) < 30 {
		t.Fatalf("only %d variables: %v", len(seen), seen)
	}
}
