// sluice serve --envoy-config with a FIFO named *.yaml in the directory: skipped (logged, counted), never opened, at the start and at reloads.

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// A FIFO named *.yaml (or *.yml) blocks whoever opens it for reading until a writer
// comes: serve skips it (a warning with its path, counted in
// sluice_config_files_skipped_total at every load) and serves the other
// files; the start and each reload (a file change, SIGHUP) finish within
// serve's 10 s start bound and waitLog's 10 s, and no reader ever holds
// the FIFO open (opening it for writing without blocking fails while no
// reader has it).
func TestServeEnvoyConfigFifoSkipped(t *testing.T) {
	dir := t.TempDir()
	cfg, fifo := filepath.Join(dir, "edge.yaml"), filepath.Join(dir, "pipe.yaml")
	writePolicy(t, cfg, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 1}\n")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() { // (a reader of the FIFO would show as a writer's open succeeding)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
				close(opened)
				return
			}
		}
	}()

	p := serve(t, "--envoy-config", dir, "--grpc", "127.0.0.1:0", "--reload", "100ms")
	_, c := dialRLS(t, p)
	if r, err := c.ShouldRateLimit(context.Background(), ipRequest("10.0.0.1")); err != nil || r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetName() != "per_ip" {
		t.Fatalf("the file beside the FIFO: %v %v", r, err)
	}
	p.waitLog(t, "envoy config entry skipped")
	if !p.logged(`"path":"`+fifo+`"`) || !p.logged("not a regular file") {
		t.Errorf("the skip is logged without the FIFO's path or why:\n%s", strings.Join(p.logs, "\n"))
	}
	skipped := func() float64 { return metrics(t, p)["sluice_config_files_skipped_total"] }
	if n := skipped(); n != 1 {
		t.Errorf("sluice_config_files_skipped_total %v after the start, want 1", n)
	}

	// A FIFO made after the start and a file change: the reload skips both FIFOs.
	late := filepath.Join(dir, "late.yml")
	if err := syscall.Mkfifo(late, 0o644); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, cfg, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: roomier, unit: minute, requests_per_unit: 5}\n")
	p.waitLog(t, "envoy config reloaded")
	if r, err := c.ShouldRateLimit(context.Background(), ipRequest("10.0.0.1")); err != nil || r.Statuses[0].CurrentLimit.GetName() != "roomier" {
		t.Fatalf("after the reload: %v %v", r, err)
	}
	if n := skipped(); n != 3 || !p.logged(`"path":"`+late+`"`) {
		t.Errorf("sluice_config_files_skipped_total %v after a reload, want 3 (the late FIFO logged: %v)", n, p.logged(late))
	}
	// SIGHUP reloads whatever the content.
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for skipped() != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("sluice_config_files_skipped_total %v 10 s after SIGHUP, want 5: the reload blocked?", skipped())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r, err := c.ShouldRateLimit(context.Background(), ipRequest("10.0.0.2")); err != nil || r.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("after SIGHUP: %v %v", r, err)
	}
	select {
	case <-opened:
		t.Error("the FIFO was opened for reading")
	default:
	}
}
