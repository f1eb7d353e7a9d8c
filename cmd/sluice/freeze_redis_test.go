// Tests of sluice serve while its Redis is frozen (SIGSTOP), killed or
// restarted empty, under load: every answer within the store timeout, logs
// bounded, local failover within its stated bound.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// sample is one answered request of a load.
type sample struct {
	at, took time.Duration // since the load started; how long it took
	code     int
}

// load sends checks from n clients until stop is closed and returns every
// answer (code 0: no answer).
func load(p *proc, n int, body func(g, i int) string, stop <-chan struct{}) (func() []sample, time.Time) {
	var mu sync.Mutex
	var out []sample
	var wg sync.WaitGroup
	start := time.Now()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				resp, err := client.Post(p.addr+"/v1/check", "application/json", strings.NewReader(body(g, i)))
				code := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				out = append(out, sample{t0.Sub(start), time.Since(t0), code})
				mu.Unlock()
			}
		}()
	}
	return func() []sample { wg.Wait(); return out }, start
}

// timed is one call and how long it took (code 0: no answer within 3 s).
func timed(t *testing.T, p *proc, method, path, body string) (int, string, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest(method, p.addr+path, strings.NewReader(body))
	t0 := time.Now()
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error(), time.Since(t0)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(t0)
}

// p99 of the samples' durations.
func p99(s []sample) time.Duration {
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = x.took
	}
	slices.Sort(d)
	if len(d) == 0 {
		return 0
	}
	return d[(len(d)*99)/100]
}

// A frozen Redis (SIGSTOP for 5 s) under load from 4 clients: in fail_open
// and local every check is answered within --store-timeout + 50 ms (p99,
// and no request past twice that), throughput stays at least half of what
// it was before the freeze, and request_id checks, /v1/settle,
// /v1/release, /v1/pause and /readyz answer within the bound too.
func TestServeRedisFrozenAnswersWithinTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	const bound = timeout + 50*time.Millisecond
	for _, mode := range []string{"fail_open", "local"} {
		t.Run(mode, func(t *testing.T) {
			srv := startRedis(t)
			pol := filepath.Join(t.TempDir(), "p.yaml")
			writePolicy(t, pol, "limits:\n  - name: g\n    key: \"t:{t}\"\n    capacity: 1000000\n    refill_per_second: 1000000\n"+
				"  - name: c\n    key: \"c:{c}\"\n    max_in_flight: 1000\n    lease_ttl: 1m\n")
			p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--store-timeout", timeout.String(),
				"--on-store-error", mode)
			lease := func(body string) string {
				code, b := call(t, p, "POST", "/v1/check", body)
				var res struct {
					Lease string `json:"lease"`
				}
				json.Unmarshal([]byte(b), &res)
				if code != 200 || res.Lease == "" {
					t.Fatalf("check %s: %d %s", body, code, b)
				}
				return res.Lease
			}
			// Leases recorded on Redis before the freeze.
			var before []string
			for i := range 4 {
				before = append(before, lease(fmt.Sprintf(`{"descriptors":{"c":"x%d"}}`, i)))
			}
			stop := make(chan struct{})
			wait, start := load(p, 4, func(g, i int) string { return fmt.Sprintf(`{"descriptors":{"t":"k%d"}}`, (g*7+i)%20) }, stop)
			time.Sleep(1500 * time.Millisecond)
			frozenAt := time.Since(start)
			srv.Pause()
			defer srv.Resume()
			// The other paths, while frozen: each answered within the bound.
			// Each path answers as the mode says: checks (with a
			// request_id too) are decided without Redis, settles and
			// releases of leases recorded on Redis answer 503, those of
			// leases issued during the freeze (kept in process) succeed.
			type probe struct {
				what       string
				code, want int
				took       time.Duration
			}
			var probes []probe
			want := map[string]int{"check with request_id": 200, "retried request_id": 200, "settle of a lease from before": 503,
				"release of a lease from before": 503, "settle of a lease from the freeze": 200, "release of a lease from the freeze": 200,
				"pause": 200, "readyz": 200}
			note := func(what string, code int, took time.Duration) {
				probes = append(probes, probe{what, code, want[what], took})
			}
			time.Sleep(300 * time.Millisecond)
			var during []string
			for i := range 10 {
				code, body, d := timed(t, p, "POST", "/v1/check", fmt.Sprintf(`{"descriptors":{"t":"r","c":"y%d"},"request_id":"frozen-%d"}`, i, i))
				note("check with request_id", code, d)
				var res struct {
					Lease string `json:"lease"`
				}
				json.Unmarshal([]byte(body), &res)
				if code == 200 && res.Lease != "" {
					during = append(during, res.Lease)
				}
				code, again, d := timed(t, p, "POST", "/v1/check", fmt.Sprintf(`{"descriptors":{"t":"r","c":"y%d"},"request_id":"frozen-%d"}`, i, i))
				note("retried request_id", code, d)
				if again != body {
					t.Errorf("retried request_id answered %s, the first %s", again, body)
				}
				time.Sleep(100 * time.Millisecond)
			}
			for _, l := range before {
				code, _, d := timed(t, p, "POST", "/v1/settle", fmt.Sprintf(`{"lease":%q,"actual_cost":0}`, l))
				note("settle of a lease from before", code, d)
				code, _, d = timed(t, p, "POST", "/v1/release", fmt.Sprintf(`{"lease":%q}`, l))
				note("release of a lease from before", code, d)
			}
			for _, l := range during {
				code, _, d := timed(t, p, "POST", "/v1/settle", fmt.Sprintf(`{"lease":%q,"actual_cost":1}`, l))
				note("settle of a lease from the freeze", code, d)
				code, _, d = timed(t, p, "POST", "/v1/release", fmt.Sprintf(`{"lease":%q}`, l))
				note("release of a lease from the freeze", code, d)
			}
			for range 5 {
				code, _, d := timed(t, p, "POST", "/v1/pause", `{"descriptors":{"t":"zz"},"retry_after_ms":1000}`)
				note("pause", code, d)
				code, body, d := timed(t, p, "GET", "/readyz", "")
				note("readyz", code, d)
				if !strings.Contains(body, `"degraded"`) {
					t.Errorf("readyz while frozen: %s", body)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if rest := 5*time.Second - (time.Since(start) - frozenAt); rest > 0 {
				time.Sleep(rest)
			}
			thawedAt := time.Since(start)
			srv.Resume()
			time.Sleep(500 * time.Millisecond)
			close(stop)
			samples := wait()

			var pre, frozen []sample
			var worst time.Duration
			for _, s := range samples {
				switch {
				case s.at < frozenAt && s.at > 300*time.Millisecond:
					pre = append(pre, s)
				case s.at >= frozenAt && s.at+s.took <= thawedAt:
					frozen = append(frozen, s)
					worst = max(worst, s.took)
				}
				if s.code != 200 && s.at+s.took <= thawedAt {
					t.Errorf("a check answered %d (at %v, took %v)", s.code, s.at, s.took)
				}
			}
			preRate := float64(len(pre)) / (frozenAt - 300*time.Millisecond).Seconds()
			frozenRate := float64(len(frozen)) / (thawedAt - frozenAt).Seconds()
			t.Logf("%s: before %.0f req/s (p99 %v), frozen %.0f req/s (p99 %v, slowest %v)", mode, preRate, p99(pre), frozenRate, p99(frozen), worst)
			for _, pr := range probes {
				if pr.took > bound || pr.code != pr.want {
					t.Errorf("%s: %d after %v, want %d within %v", pr.what, pr.code, pr.took, pr.want, bound)
				}
			}
			if len(during) != 10 {
				t.Errorf("%d of 10 checks during the freeze returned a lease", len(during))
			}
			if p := p99(frozen); p > bound {
				t.Errorf("p99 %v while frozen, want <= %v", p, bound)
			}
			if worst > 2*bound {
				t.Errorf("slowest check %v while frozen, want <= %v", worst, 2*bound)
			}
			if frozenRate < preRate/2 {
				t.Errorf("%.0f req/s while frozen, less than half of %.0f before", frozenRate, preRate)
			}
		})
	}
}

// errorLines counts p's log records at level ERROR (and WARN) by message,
// and reports whether any carried a "suppressed" count.
func errorLines(p *proc) (counts map[string]int, suppressed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts = map[string]int{}
	for _, l := range p.logs {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		if lvl, _ := rec["level"].(string); lvl == "ERROR" || lvl == "WARN" {
			counts[fmt.Sprint(rec["msg"])]++
			if _, ok := rec["suppressed"]; ok {
				suppressed = true
			}
		}
	}
	return counts, suppressed
}

// Redis killed for about 2 s under load from 4 clients: each repeated
// error message is logged at most a burst of 20 then 10 a second (the
// rest counted in "suppressed"), and the lease ids answered meanwhile
// (their records kept in process) are released and settled after Redis is
// back.
func TestServeRedisKilledLogsBounded(t *testing.T) {
	for _, mode := range []string{"fail_open", "fail_closed"} {
		t.Run(mode, func(t *testing.T) {
			srv := startRedis(t)
			pol := filepath.Join(t.TempDir(), "p.yaml")
			writePolicy(t, pol, "limits:\n  - name: g\n    key: \"t:{t}\"\n    capacity: 1000000\n    refill_per_second: 1000000\n"+
				"  - name: c\n    key: \"c:{c}\"\n    max_in_flight: 100000\n    lease_ttl: 1m\n")
			p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--store-timeout", "200ms", "--on-store-error", mode)
			stop := make(chan struct{})
			wait, start := load(p, 4, func(g, i int) string { return fmt.Sprintf(`{"descriptors":{"t":"k%d","c":"x"}}`, (g*7+i)%20) }, stop)
			time.Sleep(time.Second)
			srv.Kill()
			killedAt := time.Since(start)
			time.Sleep(1100 * time.Millisecond)
			// A lease answered while Redis is down.
			code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"lease","c":"y"}}`)
			var res struct {
				Lease string `json:"lease"`
			}
			json.Unmarshal([]byte(body), &res)
			if mode == "fail_open" && (code != 200 || res.Lease == "") {
				t.Fatalf("check with Redis down: %d %s", code, body)
			}
			time.Sleep(1100 * time.Millisecond)
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			outage := time.Since(start) - killedAt
			deadline := time.Now().Add(10 * time.Second)
			for {
				code, body := call(t, p, "GET", "/readyz", "")
				if code == 200 && strings.Contains(body, `"ready"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("readyz did not recover")
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			close(stop)
			samples := wait()
			counts, suppressed := errorLines(p)
			t.Logf("%s: %d requests, Redis down %v; ERROR/WARN records by message: %v (suppressed field: %v)", mode, len(samples), outage, counts, suppressed)
			limit := 20 + int(10*(time.Since(start)-killedAt).Seconds()+1)
			for msg, n := range counts {
				if n > limit {
					t.Errorf("%q logged %d times, more than %d (a burst of 20, then 10 a second)", msg, n, limit)
				}
			}
			if mode == "fail_closed" && !suppressed {
				t.Error("no record carries a suppressed count, though every check failed while Redis was down")
			}
			if mode == "fail_open" {
				// The lease answered during the outage is usable now.
				if code, body := call(t, p, "POST", "/v1/settle", fmt.Sprintf(`{"lease":%q,"actual_cost":0}`, res.Lease)); code != 200 {
					t.Errorf("settle after recovery of a lease answered during the outage: %d %s", code, body)
				}
				if code, body := call(t, p, "POST", "/v1/release", fmt.Sprintf(`{"lease":%q}`, res.Lease)); code != 200 {
					t.Errorf("release after recovery of a lease answered during the outage: %d %s", code, body)
				}
			}
		})
	}
}

// Local failover's bound (docs/behaviour.md 5.2), with B=10, r=5/s on one
// key under load from 4 clients per instance: Redis killed, restarted empty
// 3 s later, load for about 8.8 s in all. One instance admits at most
// B + r*T over the whole run (its local bucket starts from the level Redis
// last reported, and it hands its level back to the empty Redis before
// deciding there); two instances (--instances 2) at most that plus
// 2*(n-1)*floor(B/n).
func TestServeRedisRestartedEmptyLocalBound(t *testing.T) {
	const B, r = 10, 5.0
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n, "instances"), func(t *testing.T) {
			srv := startRedis(t)
			pol := filepath.Join(t.TempDir(), "p.yaml")
			writePolicy(t, pol, fmt.Sprintf("limits:\n  - name: g\n    key: \"t:{t}\"\n    capacity: %d\n    refill_per_second: %v\n", B, r))
			var procs []*proc
			for range n {
				procs = append(procs, serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--store-timeout", "200ms",
					"--on-store-error", "local", "--instances", fmt.Sprint(n)))
			}
			stop := make(chan struct{})
			var waits []func() []sample
			start := time.Now()
			for _, p := range procs {
				w, _ := load(p, 4, func(g, i int) string { return `{"descriptors":{"t":"hot"}}` }, stop)
				waits = append(waits, w)
			}
			time.Sleep(1500 * time.Millisecond)
			srv.Kill()
			time.Sleep(3 * time.Second)
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(8800*time.Millisecond - time.Since(start))
			close(stop)
			var admitted, other, total int
			var end time.Duration
			for _, w := range waits {
				for _, s := range w() {
					total++
					end = max(end, s.at+s.took)
					switch s.code {
					case 200:
						admitted++
					case 429:
					default:
						other++
					}
				}
			}
			T := end.Seconds()
			bound := float64(B) + r*T + float64(2*(n-1)*(B/n))
			t.Logf("%d instance(s): admitted %d of %d in %.2f s (other %d); B + r*T = %.1f, bound %.1f",
				n, admitted, total, T, other, B+r*T, bound)
			if other != 0 {
				t.Errorf("%d answers neither 200 nor 429", other)
			}
			if float64(admitted) > bound {
				t.Errorf("admitted %d, more than the bound %.1f", admitted, bound)
			}
			if float64(admitted) < 0.8*r*T {
				t.Errorf("admitted %d, less than 80%% of r*T = %.1f: the local buckets refuse too much", admitted, r*T)
			}
			// Back on Redis: the key is drained there, by every instance.
			for _, p := range procs {
				if code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"hot"},"cost":10}`); code != 429 {
					t.Errorf("a full-capacity check after the run: %d %s", code, body)
				}
			}
		})
	}
}
