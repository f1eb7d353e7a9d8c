package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// examplePolicy is the container image's policy (deploy/image/policy.yaml):
// the healthcheck tests serve it, so that it is known to load.
const examplePolicy = "../../deploy/image/policy.yaml"

// sluice healthcheck against a real sluice serve: 0 while it serves
// (/healthz, and /readyz with --ready), 1 once it is gone, with one line
// saying why.
func TestHealthcheck(t *testing.T) {
	p := serve(t, "--config", examplePolicy)
	for _, args := range [][]string{
		{"--url", p.addr},
		{"--url", p.addr + "/"},
		{"--url", p.addr, "--ready"},
	} {
		code, out, errOut := runCmd(t, "", append([]string{"healthcheck"}, args...)...)
		want := "/healthz: 200 ok"
		if len(args) == 3 {
			want = "/readyz: 200 "
		}
		if code != 0 || !strings.HasPrefix(out, "healthy: GET "+p.addr) || !strings.Contains(out, want) || errOut != "" {
			t.Fatalf("healthcheck %v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	code, out, errOut := runCmd(t, "", "healthcheck", "--url", p.addr)
	if code != 1 || out != "" || !strings.Contains(errOut, "unhealthy: GET "+p.addr+"/healthz: ") || !strings.Contains(errOut, "refused") {
		t.Fatalf("healthcheck of a stopped service: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A service that accepts and never answers is unhealthy after --timeout.
func TestHealthcheckTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	code, _, errOut := runCmd(t, "", "healthcheck", "--url", "http://"+ln.Addr().String(), "--timeout", "200ms")
	if code != 1 || !strings.Contains(errOut, "no answer within --timeout 200ms") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v with --timeout 200ms", d)
	}
}

// Bad flags are usage errors (exit 2), found before any request.
func TestHealthcheckBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--url", "ftp://127.0.0.1:8080"},
		{"--url", "127.0.0.1:8080"},
		{"--timeout", "0s"},
	} {
		code, _, errOut := runCmd(t, "", append([]string{"healthcheck"}, args...)...)
		if code != 2 || !strings.Contains(errOut, args[0]) {
			t.Errorf("healthcheck %v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
