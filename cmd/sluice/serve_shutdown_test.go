package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// idleClients opens, to p (started with --grpc), the connections a drain
// must not wait for: a TCP connection to each port that sends nothing, an
// HTTP keep-alive connection after one request, and a gRPC client
// connection after one call. They close with the test.
func idleClients(t *testing.T, p *proc) {
	t.Helper()
	for _, addr := range []string{strings.TrimPrefix(p.addr, "http://"), p.grpc} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Get(p.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	conn, _ := dialRLS(t, p)
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the servers have accepted every connection
}

// waitExit waits for p to exit (at most 20 s) and returns how long it took
// since from; it fails the test unless the exit status is 0.
func waitExit(t *testing.T, p *proc, from time.Time) time.Duration {
	t.Helper()
	select {
	case err := <-p.done:
		took := time.Since(from)
		if err != nil {
			t.Fatalf("exit after %v: %v\n%s", took, err, p.text())
		}
		return took
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after SIGTERM\n%s", p.text())
	}
	return 0
}

// With nothing in flight, SIGTERM ends the process within 1 s, whatever
// idle connections clients hold (HTTP's Shutdown alone waits 5 s for a
// connection that never sent a request; gRPC's GracefulStop waits for a
// connection's handshake).
func TestServeShutdownIgnoresIdleConnections(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--grpc", "127.0.0.1:0")
	idleClients(t, p)
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	took := waitExit(t, p, start)
	t.Logf("exited %v after SIGTERM", took)
	if took >= time.Second {
		t.Fatalf("exit %v after SIGTERM with only idle connections, want < 1 s", took)
	}
	if !p.logged(`"msg":"stopped"`) {
		t.Fatalf("no stopped record:\n%s", p.text())
	}
}

// A request held in flight (max_wait_ms) when SIGTERM comes is answered;
// the process then exits promptly although idle connections remain.
func TestServeShutdownDrainsInFlightWithIdleConnections(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: slow\n    key: \"k\"\n    capacity: 1\n    refill_per_second: 2\n")
	p := serve(t, "--config", pol, "--grpc", "127.0.0.1:0")
	call(t, p, "POST", "/v1/check", `{"descriptors": {}}`) // empties the bucket
	idleClients(t, p)
	type answer struct {
		code int
		at   time.Time
	}
	result := make(chan answer, 1)
	go func() {
		resp, err := http.Post(p.addr+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {}, "max_wait_ms": 3000}`))
		if err != nil {
			result <- answer{}
			return
		}
		resp.Body.Close()
		result <- answer{resp.StatusCode, time.Now()}
	}()
	time.Sleep(150 * time.Millisecond) // held: a token comes ~500 ms after the first check
	p.cmd.Process.Signal(syscall.SIGTERM)
	var a answer
	select {
	case a = <-result:
	case <-time.After(10 * time.Second):
		t.Fatal("held request not answered")
	}
	if a.code != 200 {
		t.Fatalf("held request: %d", a.code)
	}
	took := waitExit(t, p, a.at)
	t.Logf("exited %v after the held request was answered", took)
	if took >= time.Second {
		t.Fatalf("exit %v after the last request was answered, want < 1 s", took)
	}
}
