// Tests of sluice ratelimit's REDIS_* checks with and without REDIS_URL, and of the runtime directory's skipped entries.

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

// A REDIS_* value the reference refuses stops the start when sluice reads
// the variable, REDIS_URL set or not (it was ignored without REDIS_URL);
// in a variable sluice ignores it is a warning, as is a variable sluice
// reads only with Redis set while REDIS_URL is not. Warnings never show a
// value.
func TestRatelimitRedisEnvCheck(t *testing.T) {
	base := map[string]string{"USE_STATSD": "false", "RUNTIME_ROOT": t.TempDir()}
	run := func(set map[string]string) (*rlSettings, error) {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range set {
			env[k] = v
		}
		c, err := ratelimitServe(mapEnv(env))
		if err != nil {
			return nil, err
		}
		return c.rl.rs, nil
	}
	const redis = "127.0.0.1:1"
	for _, tc := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"REDIS_TLS": "yes"}, "REDIS_TLS="},
		{map[string]string{"REDIS_POOL_SIZE": "ten"}, "REDIS_POOL_SIZE="},
		{map[string]string{"REDIS_URL": redis, "REDIS_POOL_SIZE": "ten"}, "REDIS_POOL_SIZE="},
		{map[string]string{"REDIS_TIMEOUT": "soon"}, "REDIS_TIMEOUT="},
		{map[string]string{"REDIS_PERSECOND": "maybe"}, "REDIS_PERSECOND="},
		{map[string]string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "1x"}, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION="},
		{map[string]string{"REDIS_TYPE": "galaxy"}, "REDIS_TYPE="},
		{map[string]string{"REDIS_SOCKET_TYPE": "pipe"}, "REDIS_SOCKET_TYPE="},
		{map[string]string{"REDIS_URL": redis, "REDIS_TLS": "yes"}, "REDIS_TLS="},
		{map[string]string{"REDIS_URL": redis, "REDIS_TYPE": "galaxy"}, "REDIS_TYPE="},
	} {
		_, err := run(tc.set)
		if err == nil || strings.Count(err.Error(), tc.want) != 1 {
			t.Errorf("%v: %v; want one error naming %s", tc.set, err, strings.TrimSuffix(tc.want, "="))
		}
	}
	// Warnings: the variable's name, never its value.
	for _, tc := range []struct {
		set  map[string]string
		want []string // the variables warned about, in rlRedisVars' order
	}{
		{map[string]string{"REDIS_PIPELINE_WINDOW": "fast", "REDIS_STARTUP_MAX_INTERVAL": "x", "REDIS_PERSECOND_POOL_SIZE": "many"},
			[]string{"REDIS_PIPELINE_WINDOW", "REDIS_PERSECOND_POOL_SIZE", "REDIS_STARTUP_MAX_INTERVAL"}},
		{map[string]string{"REDIS_URL": redis, "REDIS_PIPELINE_WINDOW": "fast"}, []string{"REDIS_PIPELINE_WINDOW"}},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_TLS": "true", "REDIS_AUTH": "s3cret", "REDIS_PERSECOND": "false",
			"REDIS_POOL_SIZE": "20", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "false"},
			[]string{"REDIS_TYPE", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS"}},
		// Taken and acted on, or valid and ignored: no warning.
		{map[string]string{"REDIS_URL": redis, "REDIS_TYPE": "cluster", "REDIS_AUTH": "s3cret", "REDIS_POOL_SIZE": "20",
			"REDIS_PIPELINE_WINDOW": "150us", "REDIS_PIPELINE_LIMIT": "8", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "WAIT"}, nil},
		{map[string]string{"REDIS_PIPELINE_WINDOW": "150us", "REDIS_PERSECOND_URL": "/x.sock"}, nil},
	} {
		rs, err := run(tc.set)
		if err != nil {
			t.Errorf("%v: %v", tc.set, err)
			continue
		}
		var got []string
		for _, w := range rs.warnings {
			got = append(got, w.variable)
			if strings.Contains(w.reason, "s3cret") || strings.Contains(w.reason, "fast") {
				t.Errorf("%v: the warning %q shows a value", tc.set, w.reason)
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%v: warnings for %v, want %v (%v)", tc.set, got, tc.want, rs.warnings)
		}
	}
}

// Entries of the runtime directory that are not files sluice can read (a
// dangling link, a link loop, a link to a directory, a FIFO) are skipped, each logged
// with its path and error and counted at every load; the files beside
// them load. Variables not in effect are logged at start.
func TestRatelimitSkippedEntries(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	dir := filepath.Join(root, "ratelimit", "config")
	writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic, "elsewhere/x.yaml": rtBasic})
	dangling, toDir, fifo := filepath.Join(dir, "gone.yaml"), filepath.Join(dir, "dir.yaml"), filepath.Join(dir, "pipe.yaml")
	if err := os.Symlink(filepath.Join(dir, "nothing"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "elsewhere"), toDir); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(dir, "loop.yaml")
	if err := os.Symlink("loop.yaml", loop); err != nil {
		t.Fatal(err)
	}
	env := rlEnv(t, root, "")
	env["REDIS_TYPE"], env["REDIS_PIPELINE_WINDOW"] = "cluster", "fast"
	p := startRatelimit(t, env)
	rlExpect(t, "basic", rlAsk(t, rlClient(t, p), rlRequest("basic", [][][2]string{{{"key1", "x"}}}, 1)), ok, rlStatus{ok, 50, sec, 49})

	records := func(msg, field string) map[string]string {
		out := map[string]string{}
		for _, line := range strings.Split(p.log(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != msg {
				continue
			}
			k, _ := rec[field].(string)
			why, _ := rec["error"].(string)
			if why == "" {
				why, _ = rec["reason"].(string)
			}
			if rec["level"] != "WARN" || why == "" {
				t.Errorf("%s: %v; want a warning with its error or reason", msg, rec)
			}
			out[k] = why
		}
		return out
	}
	skipped := records("runtime config entry skipped", "path")
	if len(skipped) != 4 || skipped[dangling] == "" || !strings.Contains(skipped[loop], "levels of symbolic links") ||
		!strings.Contains(skipped[toDir], "directory") || !strings.Contains(skipped[fifo], "regular") {
		t.Errorf("skipped entries logged: %v; want the dangling link, the loop, the link to a directory and the FIFO", skipped)
	}
	if n := rlMetric(t, p.metrics, "sluice_config_files_skipped_total", ""); n != 4 {
		t.Errorf("sluice_config_files_skipped_total %v after the start, want 4", n)
	}
	vars := records("environment variable not in effect", "variable")
	if len(vars) != 2 || !strings.Contains(vars["REDIS_TYPE"], "REDIS_URL is not") || !strings.Contains(vars["REDIS_PIPELINE_WINDOW"], "reference") {
		t.Errorf("variables not in effect logged: %v; want REDIS_TYPE and REDIS_PIPELINE_WINDOW", vars)
	}

	// A reload (a new file) skips them again, and counts them again.
	before := rlMetric(t, p.metrics, "ratelimit_service_config_load_success", "")
	writeRuntime(t, root, map[string]string{"ratelimit/config/reload.yaml": rtReload})
	waitLoads(t, p, before)
	deadline := time.Now().Add(10 * time.Second)
	for rlMetric(t, p.metrics, "sluice_config_files_skipped_total", "") != 8 {
		if time.Now().After(deadline) {
			t.Fatalf("sluice_config_files_skipped_total %v after a reload, want 8", rlMetric(t, p.metrics, "sluice_config_files_skipped_total", ""))
		}
		time.Sleep(50 * time.Millisecond)
	}
	rlExpect(t, "reloaded", rlAsk(t, rlClient(t, p), rlRequest("reload", [][][2]string{{{"key1", "foo"}}}, 1)), ok, rlStatus{ok, 50, sec, 49})
}
