package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// binary is the real sluice binary, built once for the black-box tests:
// $SLUICE_BIN when set (a binary built from this tree, as the clients'
// tests take it; scripts/test.sh builds it once for all of them), else
// built here.
var binary string

func TestMain(m *testing.M) {
	if b := os.Getenv("SLUICE_BIN"); b != "" {
		binary = b
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `sluice serve`.
type proc struct {
	cmd  *exec.Cmd
	addr string
	grpc string
	mu   sync.Mutex
	logs []string
	done chan error
}

func (p *proc) logged(substr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		if strings.Contains(l, substr) {
			return true
		}
	}
	return false
}

func (p *proc) waitLog(t *testing.T, substr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if p.logged(substr) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Fatalf("no log line with %q; logs:\n%s", substr, strings.Join(p.logs, "\n"))
}

func serve(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs = append(p.logs, line)
			p.mu.Unlock()
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "sluice serving" {
				if g, ok := rec["grpc"].(string); ok {
					p.grpc = g
				}
				addr <- rec["http"].(string)
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
	})
	select {
	case a := <-addr:
		p.addr = "http://" + a
	case err := <-p.done:
		t.Fatalf("sluice serve exited: %v\n%s", err, strings.Join(p.logs, "\n"))
	case <-time.After(10 * time.Second):
		t.Fatal("sluice serve did not start")
	}
	return p
}

func call(t *testing.T, p *proc, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, p.addr+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const servePolicy = "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 2\n    refill_per_second: 0.01\n"

func writePolicy(t *testing.T, path, src string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestServeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--reload", "100ms")
	check := `{"descriptors": {"tenant": "acme"}}`
	for i, want := range []int{200, 200, 429} {
		if code, body := call(t, p, "POST", "/v1/check", check); code != want {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	if code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "acme"}, "cost": 3}`); code != 422 || !strings.Contains(body, `"limit":"tenant_api"`) {
		t.Fatalf("cost above capacity: %d %s", code, body)
	}
	if code, _ := call(t, p, "GET", "/healthz", ""); code != 200 {
		t.Fatal("healthz")
	}
	if code, body := call(t, p, "GET", "/metrics", ""); code != 200 || !strings.Contains(body, `sluice_decisions_total{attempt="original",limit="tenant_api",result="rejected"} 1`) {
		t.Fatalf("metrics: %d %.300s", code, body)
	}

	// An invalid file is rejected with line and field; the old policy stays.
	writePolicy(t, pol, strings.Replace(servePolicy, "capacity: 2", "capacity: 0", 1))
	p.waitLog(t, "policy reload rejected")
	p.waitLog(t, `field \"capacity\"`)
	if code, _ := call(t, p, "POST", "/v1/check", check); code != 429 {
		t.Fatalf("after a rejected reload: %d", code)
	}
	// A valid change takes effect; the unchanged limit keeps its state.
	writePolicy(t, pol, servePolicy+"  - name: other\n    key: \"other:{tenant}\"\n    capacity: 5\n    refill_per_second: 1\n")
	p.waitLog(t, `"limits":2`)
	code, body := call(t, p, "POST", "/v1/check", check)
	if code != 429 || !strings.Contains(body, `"name":"other"`) {
		t.Fatalf("after a valid reload: %d %s", code, body)
	}
	// SIGHUP reloads too.
	writePolicy(t, pol, strings.Replace(servePolicy, "capacity: 2", "capacity: 9", 1))
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, `"reason":"SIGHUP"`)
	if code, body := call(t, p, "POST", "/v1/check", check); code != 200 {
		t.Fatalf("after SIGHUP: %d %s", code, body)
	}
}

// SIGTERM lets a request the server is holding finish, then exits 0.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	writePolicy(t, pol, "limits:\n  - name: slow\n    key: \"k\"\n    capacity: 1\n    refill_per_second: 2\n")
	p := serve(t, "--config", pol)
	call(t, p, "POST", "/v1/check", `{"descriptors": {}}`) // empties the bucket
	result := make(chan int, 1)
	go func() {
		code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {}, "max_wait_ms": 2000}`) // held ~0.5 s
		result <- code
	}()
	time.Sleep(100 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case code := <-result:
		if code != 200 {
			t.Fatalf("held request: %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held request not answered")
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit")
	}
	if !p.logged("shutting down") || !p.logged(`"msg":"stopped"`) {
		t.Fatal("no shutdown logs")
	}
}

func TestServeAuthAndBadStart(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	writePolicy(t, pol, servePolicy)
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	p := serve(t, "--config", pol, "--auth-token-file", tok)
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {}}`); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "a"}}`, "Authorization", "Bearer s3cret"); code != 200 {
		t.Fatalf("token: %d", code)
	}
	if code, _ := call(t, p, "GET", "/healthz", ""); code != 200 {
		t.Fatal("healthz must stay open")
	}
	// A bad policy at start: exit 1 with the error.
	bad := filepath.Join(dir, "bad.yaml")
	writePolicy(t, bad, "limits: [{name: a}]\n")
	out, err := exec.Command(binary, "serve", "--config", bad, "--http", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `limit "a": field "key"`) {
		t.Fatalf("bad start: %v %s", err, out)
	}
	// Every flag has an environment variable.
	cmd := exec.Command(binary, "serve", "--http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SLUICE_CONFIG="+bad)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), `field "key"`) {
		t.Fatalf("SLUICE_CONFIG: %v %s", err, out)
	}
}

// Envoy's RateLimitService from Envoy's configuration format, over gRPC,
// with health checks and reload on file change.
func TestServeEnvoyGRPC(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	writePolicy(t, cfg, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 1}\n")
	p := serve(t, "--envoy-config", dir, "--grpc", "127.0.0.1:0", "--reload", "100ms")
	conn, c := dialRLS(t, p)
	req := ipRequest("10.1.1.1")
	for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
		r, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil || r.OverallCode != want || r.Statuses[0].CurrentLimit.GetName() != "per_ip" {
			t.Fatalf("call %d: %v %v", i, r, err)
		}
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {}}`); code != 404 {
		t.Fatalf("HTTP /v1/check in Envoy mode: %d", code)
	}
	writePolicy(t, cfg, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: roomier, unit: minute, requests_per_unit: 5}\n")
	p.waitLog(t, "envoy config reloaded")
	if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetName() != "roomier" {
		t.Fatalf("after reload: %v %v", r, err)
	}
	if out, err := exec.Command(binary, "serve", "--envoy-config", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "--grpc") {
		t.Fatalf("envoy config without --grpc: %v %s", err, out)
	}
}

func TestBench(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol)
	code, out, errOut := runCmd(t, "", "bench", "--target", p.addr, "--duration", "1s", "--concurrency", "4", "--keys", "10")
	if code != 0 || !strings.Contains(out, "decisions/s") || !strings.Contains(out, "errors 0") || !strings.Contains(out, "latency p50") {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	if !strings.Contains(out, "admitted 20,") { // 10 tenants x capacity 2; nothing refills at 0.01/s
		t.Fatalf("want exactly 20 admitted: %s", out)
	}
	edir := t.TempDir()
	writePolicy(t, filepath.Join(edir, "e.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n")
	g := serve(t, "--envoy-config", edir, "--grpc", "127.0.0.1:0")
	code, out, errOut = runCmd(t, "", "bench", "--grpc", "--target", g.grpc, "--duration", "1s", "--concurrency", "4")
	if code != 0 || !strings.Contains(out, "gRPC") || !strings.Contains(out, "refused 0, errors 0") {
		t.Fatalf("grpc: %d %q %q", code, out, errOut)
	}
	for _, target := range []string{"http://192.168.1.5:8080", "http://example.com", "ftp://127.0.0.1"} {
		if code, _, errOut := runCmd(t, "", "bench", "--target", target, "--duration", "1s"); code != 2 || !strings.Contains(errOut, "target") {
			t.Errorf("%s: %d %q", target, code, errOut)
		}
	}
	if code, _, errOut := runCmd(t, "", "bench", "--target", p.addr, "--duration", "1h"); code != 2 || !strings.Contains(errOut, "10m") {
		t.Errorf("unbounded duration: %d %q", code, errOut)
	}
}

// --grpc with a sluice policy: the same limits over Envoy's API.
func TestServePolicyOverGRPC(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	writePolicy(t, pol, "limits:\n  - name: per_ip\n    key: \"ip:{remote_address}\"\n    capacity: 1\n    refill_per_second: 0.01\n")
	p := serve(t, "--config", pol, "--grpc", "127.0.0.1:0")
	_, c := dialRLS(t, p)
	req := ipRequest("10.2.2.2")
	for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
		if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != want {
			t.Fatalf("call %d: %v %v", i, r, err)
		}
	}
	// The HTTP API shares the buckets.
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {"remote_address": "10.2.2.2"}}`); code != 429 {
		t.Fatalf("HTTP after gRPC: %d", code)
	}
}

// dialRLS connects a go-control-plane RateLimitService client to p's gRPC
// address; the connection closes with the test.
func dialRLS(t *testing.T, p *proc) (*grpc.ClientConn, rls.RateLimitServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, rls.NewRateLimitServiceClient(conn)
}

// ipRequest is a call in domain edge with one remote_address entry.
func ipRequest(ip string) *rls.RateLimitRequest {
	return &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}}}}
}
