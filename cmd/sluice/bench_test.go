package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A dead target: the first error, exit 1, and no figures.
func TestBenchDeadTarget(t *testing.T) {
	addr := closedPort(t)
	for _, args := range [][]string{
		{"--target", "http://" + addr},
		{"--grpc", "--target", addr},
	} {
		args = append([]string{"bench", "--requests", "20", "--concurrency", "2", "--duration", "30s"}, args...)
		code, out, errOut := runCmd(t, "", args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "all 20 requests failed; the first: ") ||
			!strings.Contains(errOut, "dial tcp "+addr+": connect: connection refused") || strings.Contains(errOut, "decisions/s") {
			t.Errorf("%v: %d %q %q", args, code, out, errOut)
		}
	}
}

// A target answering every request with an error status: that status and
// its body, exit 1, and no figures.
func TestBenchEveryRequestRefusedWithStatus(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error": "store_full"}` + "\n"))
	}))
	defer ts.Close()
	code, out, errOut := runCmd(t, "", "bench", "--target", ts.URL, "--requests", "10", "--concurrency", "2", "--duration", "30s")
	if code != 1 || out != "" || !strings.Contains(errOut, `all 10 requests failed; the first: `+ts.URL+`/v1/check: status 503 Service Unavailable: {"error": "store_full"}`) {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
}

// Some requests failed: the figures are of the decided ones, with the
// error count and the first error.
func TestBenchSomeRequestsFail(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch i := n.Add(1); {
		case i%4 == 0:
			http.Error(w, "boom", http.StatusInternalServerError)
		case i%2 == 1:
			w.Write([]byte(`{"allowed": true}`))
		default:
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer ts.Close()
	code, out, errOut := runCmd(t, "", "bench", "--target", ts.URL, "--requests", "40", "--concurrency", "2", "--duration", "30s")
	if code != 0 {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	for _, want := range []string{
		"(requests 40: admitted 20, refused 10, errors 10)",
		"10 of 40 requests failed (not counted in decisions/s nor latency); the first: " + ts.URL + "/v1/check: status 500 Internal Server Error: boom\n",
		"latency p50 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
