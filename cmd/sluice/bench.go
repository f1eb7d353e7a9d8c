// sluice bench: a load generator against a sluice on this machine (HTTP or gRPC), and what a run measured.

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/schollz/progressbar/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type benchCmd struct {
	Target      string        `required:"" help:"The service: http://127.0.0.1:PORT (HTTP/JSON), or 127.0.0.1:PORT with --grpc. Loopback only."`
	Duration    time.Duration `default:"10s" help:"How long to send (at most 10m)."`
	Concurrency int           `default:"64" help:"Concurrent clients (1 to 4096)."`
	Keys        int           `default:"1000" help:"Distinct keys (tenants, or descriptor values with --grpc), used round-robin."`
	Requests    int64         `default:"20000000" help:"Stop after this many requests at most."`
	GRPC        bool          `name:"grpc" help:"Call Envoy's RateLimitService over gRPC instead of POST /v1/check."`
	Domain      string        `default:"edge" help:"--grpc: the request's domain."`
	Key         string        `default:"remote_address" help:"--grpc: the descriptor entry's key."`
	Descriptor  string        `default:"tenant" help:"HTTP: the descriptor whose value is the key."`
}

// loopback refuses any target that is not this machine: a load generator
// must never point elsewhere.
func loopback(host string) error {
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--target host %q is not a loopback address (127.0.0.0/8, ::1, localhost)", host)
	}
	return nil
}

// BenchResult is what a run measured. Latencies are those of the requests
// decided (admitted or refused); a failed request counts in Errors only, and
// FirstError is the first failure's error (nil when none failed).
type BenchResult struct {
	Requests, Admitted, Refused, Errors int64
	FirstError                          error
	Elapsed                             time.Duration
	P50, P90, P99, Max                  time.Duration
}

// Validate checks every flag before anything is sent (kong calls it after
// parsing; its error is a usage error, exit status 2).
func (c benchCmd) Validate() error {
	switch {
	case c.Duration <= 0 || c.Duration > 10*time.Minute:
		return fmt.Errorf("--duration %v must be within (0, 10m]", c.Duration)
	case c.Concurrency < 1 || c.Concurrency > 4096:
		return fmt.Errorf("--concurrency %d must be 1 to 4096", c.Concurrency)
	case c.Keys < 1 || c.Keys > 10_000_000:
		return fmt.Errorf("--keys %d must be 1 to 10000000", c.Keys)
	case c.Requests < 1:
		return fmt.Errorf("--requests %d must be at least 1", c.Requests)
	}
	_, err := c.httpTarget()
	return err
}

// httpTarget is --target as a URL (nil with --grpc), or why it is not a
// loopback target of the chosen protocol.
func (c benchCmd) httpTarget() (*url.URL, error) {
	if c.GRPC {
		host, _, err := net.SplitHostPort(c.Target)
		if err != nil {
			return nil, fmt.Errorf("--target %q: want host:port with --grpc", c.Target)
		}
		return nil, loopback(host)
	}
	u, err := url.Parse(c.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--target %q: want http://127.0.0.1:PORT", c.Target)
	}
	return u, loopback(u.Hostname())
}

// Run loads the target for --duration (or --requests) and prints what it
// measured; when every request failed it prints no figures and returns the
// first failure.
func (c benchCmd) Run(e *env) error {
	u, err := c.httpTarget()
	if err != nil {
		return err
	}
	var do func(ctx context.Context, i int) (bool, error)
	if c.GRPC {
		conn, err := grpc.NewClient(c.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		cl := rls.NewRateLimitServiceClient(conn)
		do = func(ctx context.Context, i int) (bool, error) {
			r, err := cl.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: c.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: c.Key, Value: strconv.Itoa(i)}}}}})
			if err != nil {
				return false, err
			}
			return r.OverallCode == rls.RateLimitResponse_OK, nil
		}
	} else {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.Concurrency, MaxConnsPerHost: c.Concurrency}}
		endpoint := u.JoinPath("/v1/check").String()
		do = func(ctx context.Context, i int) (bool, error) {
			body := []byte(`{"descriptors": {"` + c.Descriptor + `": "k` + strconv.Itoa(i) + `"}}`)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK, http.StatusTooManyRequests:
				io.Copy(io.Discard, resp.Body)
				return resp.StatusCode == http.StatusOK, nil
			}
			// The start of the body says why (sluice answers {"error": ...}).
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
			io.Copy(io.Discard, resp.Body)
			if b = bytes.TrimSpace(b); len(b) > 0 {
				return false, fmt.Errorf("%s: status %s: %s", endpoint, resp.Status, b)
			}
			return false, fmt.Errorf("%s: status %s", endpoint, resp.Status)
		}
	}
	res, err := runBench(c, do, e)
	if err != nil {
		return err
	}
	switch {
	case res.Requests == 0:
		return fmt.Errorf("no request was sent within --duration %v", c.Duration)
	case res.Admitted+res.Refused == 0:
		// Figures of failures would pass for the service's: there are none.
		return fmt.Errorf("all %d requests failed; the first: %v", res.Requests, res.FirstError)
	}
	fmt.Fprintf(e.stdout, "target %s (%s), %d clients, %d keys, %v\n", c.Target, map[bool]string{true: "gRPC", false: "HTTP/JSON"}[c.GRPC], c.Concurrency, c.Keys, res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "decisions/s %.0f  (requests %d: admitted %d, refused %d, errors %d)\n",
		float64(res.Admitted+res.Refused)/res.Elapsed.Seconds(), res.Requests, res.Admitted, res.Refused, res.Errors)
	if res.Errors > 0 {
		fmt.Fprintf(e.stdout, "%d of %d requests failed (not counted in decisions/s nor latency); the first: %v\n", res.Errors, res.Requests, res.FirstError)
	}
	fmt.Fprintf(e.stdout, "latency p50 %v  p90 %v  p99 %v  max %v\n", res.P50, res.P90, res.P99, res.Max)
	return nil
}

// Give-up thresholds of runBench: when no request has been decided after
// both this many requests and this long, the target is taken for dead.
const (
	giveUpRequests = 200
	giveUpAfter    = time.Second
)

// percentiles returns the 50th, 90th and 99th percentiles and the largest
// of the latencies of every worker (0 when there are none).
func percentiles(lat [][]time.Duration) (p50, p90, p99, largest time.Duration) {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[min(int(p*float64(len(all))), len(all)-1)] }
	return pct(0.50), pct(0.90), pct(0.99), all[len(all)-1]
}

// runBench sends requests with c.Concurrency workers until c.Duration has
// passed or c.Requests were sent; it stops early, every request having
// failed, when none was decided (admitted or refused) within the first
// giveUpRequests requests and giveUpAfter, whichever ends later.
func runBench(c benchCmd, do func(context.Context, int) (bool, error), e *env) (BenchResult, error) {
	// Requests run to completion; the deadline only stops new ones, so none
	// is cut off and counted as an error.
	ctx := context.Background()
	var giveUp atomic.Bool
	deadline := time.Now().Add(c.Duration)
	bar := progressbar.NewOptions64(int64(c.Duration/time.Second),
		progressbar.OptionSetWriter(e.stderr), progressbar.OptionSetDescription("sending"),
		progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	var sent, admitted, refused, failed atomic.Int64
	var firstErr error
	var firstOnce sync.Once
	var next atomic.Int64
	lat := make([][]time.Duration, c.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if !t0.Before(deadline) || giveUp.Load() {
					return
				}
				n := next.Add(1)
				if n > c.Requests {
					return
				}
				ok, err := do(ctx, int(n%int64(c.Keys)))
				sent.Add(1)
				if err != nil {
					f := failed.Add(1)
					firstOnce.Do(func() { firstErr = err })
					if f >= giveUpRequests && admitted.Load()+refused.Load() == 0 && time.Since(start) >= giveUpAfter {
						giveUp.Store(true)
					}
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
				switch {
				case ok:
					admitted.Add(1)
				default:
					refused.Add(1)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			bar.Add(1)
		}
	}
	bar.Finish()
	elapsed := time.Since(start)
	r := BenchResult{Requests: sent.Load(), Admitted: admitted.Load(), Refused: refused.Load(), Errors: failed.Load(), FirstError: firstErr, Elapsed: elapsed}
	r.P50, r.P90, r.P99, r.Max = percentiles(lat)
	return r, nil
}
