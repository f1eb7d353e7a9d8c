package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// heldPort listens on a loopback port for the rest of the test and returns
// its address: a serve told to listen there fails with "address already in
// use" if it gets that far, so an error of its own shows it stopped before.
func heldPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// freePort returns a loopback address nothing listens on (for a serve
// whose logs do not say where it listens).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// runServe runs `sluice serve args...` expecting it to exit by itself
// within 10 s; it returns the exit status and the output.
func runServe(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"serve"}, args...)...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after 10 s\n%s", args, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// startServe starts `sluice serve args...` and collects its stderr lines,
// without waiting for it to serve.
func startServe(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs = append(p.logs, sc.Text())
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return p
}

// text is every log line of p so far.
func (p *proc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// logRecord returns the first JSON log record of p whose msg is msg and, if
// given, which has key=value for each pair of kv.
func logRecord(t *testing.T, p *proc, msg string, kv ...string) map[string]any {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil || rec["msg"] != msg {
			continue
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			if s, _ := rec[kv[i]].(string); s != kv[i+1] {
				match = false
			}
		}
		if match {
			return rec
		}
	}
	t.Fatalf("no log record %q %v; logs:\n%s", msg, kv, strings.Join(p.logs, "\n")) // p.mu is held
	return nil
}

// Every numeric flag of serve is checked before anything starts: a bad
// value exits 2 (a usage error) naming the flag and the value, and nothing
// listens (the address it was given is held: it would fail on that).
func TestServeRejectsBadNumericFlags(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	for _, tc := range []struct{ arg, want string }{
		{"--max-keys=0", "--max-keys 0: must be at least 1"},
		{"--max-keys=-1", "--max-keys -1:"},
		{"--max-wait=-1s", "--max-wait -1s:"},
		{"--max-waiting=0", "--max-waiting 0:"},
		{"--max-waiting=-1", "--max-waiting -1:"},
		{"--max-body=0", "--max-body 0: must be at least 1"},
		{"--max-body=-1", "--max-body -1:"},
		{"--idempotency=0s", "--idempotency 0s:"},
		{"--idempotency=-1s", "--idempotency -1s:"},
		{"--lease-window=0s", "--lease-window 0s:"},
		{"--lease-window=-1m", "--lease-window -1m0s:"},
		{"--max-receipts=0", "--max-receipts 0:"},
		{"--reload=-1s", "--reload -1s:"},
		{"--store-pool-size=-1", "--store-pool-size -1:"},
		{"--store-timeout=0s", "--store-timeout 0s:"},
		{"--store-timeout=-1s", "--store-timeout -1s:"},
		{"--lease-ttl=0s", "--lease-ttl 0s:"},
		{"--lease-ttl=-1s", "--lease-ttl -1s:"},
		{"--instances=0", "--instances 0:"},
		{"--instances=-1", "--instances -1:"},
		{"--log-level=loud", "--log-level"},
		{"--log-format=xml", "--log-format"},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			code, out := runServe(t, "--config", pol, "--http", heldPort(t), "--grpc", heldPort(t), tc.arg)
			if code != 2 || !strings.Contains(out, tc.want) || strings.Contains(out, "sluice serving") || strings.Contains(out, "address already in use") {
				t.Fatalf("exit %d, want 2 with %q:\n%s", code, tc.want, out)
			}
		})
	}
	// The same checks hold for the environment variables.
	cmd := exec.Command(binary, "serve", "--config", pol, "--http", heldPort(t))
	cmd.Env = append(cmd.Environ(), "SLUICE_MAX_BODY=0")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--max-body 0") {
		t.Fatalf("SLUICE_MAX_BODY=0: %v\n%s", err, out)
	}
}

// --max-wait 0 is valid and means no server-side waiting: a check asking
// to wait is decided at once.
func TestServeMaxWaitZeroDecidesAtOnce(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: slow\n    key: \"k\"\n    capacity: 1\n    refill_per_second: 2\n")
	p := serve(t, "--config", pol, "--max-wait", "0")
	if code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {}}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	start := time.Now()
	code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {}, "max_wait_ms": 2000}`) // a token comes in 500 ms
	if took := time.Since(start); code != 429 || took > 400*time.Millisecond {
		t.Fatalf("max_wait_ms 2000 under --max-wait 0: %d after %v (want 429 at once) %s", code, took, body)
	}
}

// --log-format text writes key=value records; --log-level warn drops the
// info records (the startup line) and keeps errors.
func TestServeLogFlags(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, servePolicy)

	p := startServe(t, "--config", pol, "--http", "127.0.0.1:0", "--log-format", "text")
	p.waitLog(t, `msg="sluice serving"`)
	p.mu.Lock()
	var line string
	for _, l := range p.logs {
		if strings.Contains(l, `msg="sluice serving"`) {
			line = l
		}
	}
	p.mu.Unlock()
	m := regexp.MustCompile(`^time=\S+ level=INFO msg="sluice serving" http=(127\.0\.0\.1:\d+) `).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("not a text record: %q", line)
	}
	if resp, err := http.Get("http://" + m[1] + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz at the logged address: %v %v", resp, err)
	}

	addr := freePort(t)
	q := startServe(t, "--config", pol, "--http", addr, "--log-level", "warn", "--reload", "0")
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving at %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	writePolicy(t, pol, "limits: [{name: a}]\n")
	q.cmd.Process.Signal(syscall.SIGHUP)
	q.waitLog(t, "policy reload rejected")
	if q.logged("sluice serving") || q.logged(`"level":"INFO"`) {
		t.Fatalf("info records under --log-level warn:\n%s", q.text())
	}
}
