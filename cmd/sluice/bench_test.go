package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// A target that fails every request is given up on after the first 200
// requests and the first second, not hammered for the whole --duration.
func TestBenchGivesUpOnDeadTarget(t *testing.T) {
	var calls atomic.Int64
	fail := func(context.Context, int) (bool, error) {
		calls.Add(1)
		time.Sleep(time.Millisecond)
		return false, errors.New("connection refused")
	}
	c := benchCmd{Duration: time.Minute, Concurrency: 4, Keys: 10, Requests: 1 << 40}
	start := time.Now()
	res, err := runBench(c, fail, &env{stdout: io.Discard, stderr: io.Discard})
	elapsed := time.Since(start)
	if err != nil || res.Admitted+res.Refused != 0 || res.Errors != res.Requests || res.Requests < 200 || res.FirstError == nil {
		t.Fatalf("%+v %v", res, err)
	}
	// At least the first second; well under the minute (slack for a loaded
	// machine).
	if elapsed < time.Second || elapsed > 20*time.Second {
		t.Fatalf("gave up after %v", elapsed)
	}
	if n := calls.Load(); n != res.Requests {
		t.Fatalf("%d calls, %d counted", n, res.Requests)
	}

	// Fast failures: still the first second, then the 200 are long passed.
	start = time.Now()
	res, _ = runBench(c, func(context.Context, int) (bool, error) { return false, errors.New("refused") }, &env{stdout: io.Discard, stderr: io.Discard})
	if elapsed := time.Since(start); elapsed < time.Second || elapsed > 20*time.Second || res.Requests < 200 {
		t.Fatalf("fast failures: %d requests in %v", res.Requests, elapsed)
	}
}

// One decided request and the run goes on to --requests however many
// fail.
func TestBenchDoesNotGiveUpAfterADecision(t *testing.T) {
	var n atomic.Int64
	do := func(context.Context, int) (bool, error) {
		if n.Add(1) == 1 {
			return true, nil
		}
		return false, errors.New("boom")
	}
	c := benchCmd{Duration: time.Minute, Concurrency: 1, Keys: 10, Requests: 5000}
	res, err := runBench(c, do, &env{stdout: io.Discard, stderr: io.Discard})
	if err != nil || res.Requests != 5000 || res.Admitted != 1 || res.Errors != 4999 {
		t.Fatalf("%+v %v", res, err)
	}
}

// bench's flag errors are usage errors (exit 2), as serve's are.
func TestBenchFlagErrorsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "http://127.0.0.1:1", "--concurrency", "0"}, "--concurrency 0 must be 1 to 4096"},
		{[]string{"--target", "http://127.0.0.1:1", "--duration", "11m"}, "--duration 11m0s must be within (0, 10m]"},
		{[]string{"--target", "http://127.0.0.1:1", "--keys", "0"}, "--keys 0 must be 1 to 10000000"},
		{[]string{"--target", "http://127.0.0.1:1", "--requests", "0"}, "--requests 0 must be at least 1"},
		{[]string{"--target", "ftp://127.0.0.1:1"}, `--target "ftp://127.0.0.1:1": want http://127.0.0.1:PORT`},
		{[]string{"--target", "http://192.0.2.1:80"}, `--target host "192.0.2.1" is not a loopback address`},
		{[]string{"--grpc", "--target", "127.0.0.1"}, `--target "127.0.0.1": want host:port with --grpc`},
		{[]string{"--grpc", "--target", "example.com:81"}, `--target host "example.com" is not a loopback address`},
	} {
		code, out, errOut := runCmd(t, "", append([]string{"bench"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "sluice: bench: "+tc.want) {
			t.Errorf("%v: %d %q %q", tc.args, code, out, errOut)
		}
	}
}
