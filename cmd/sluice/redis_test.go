package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testbin"
)

// startRedis starts a redis-server of the test's own (the test is skipped
// in -short mode, and fails when redis-server is missing).
func startRedis(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	return redistest.New(t, extra...)
}

// hammer sends checks for one key from n goroutines until stop, spread
// over the procs; it returns admitted and refused counts.
func hammer(t *testing.T, procs []*proc, n int, body string, until time.Time) (admitted, refused, other int64) {
	t.Helper()
	var a, r, o atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := procs[g%len(procs)]
			for time.Now().Before(until) {
				resp, err := client.Post(p.addr+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					o.Add(1)
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					a.Add(1)
				case 429:
					r.Add(1)
				default:
					o.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return a.Load(), r.Load(), o.Load()
}

// Two sluice processes on one Redis, hammered concurrently on one key for
// several seconds, admit together at most B + r*t, and at least 99% of it.
func TestServeRedisTwoInstancesShareOneBudget(t *testing.T) {
	srv := startRedis(t)
	const B, r = 100, 200.0
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, fmt.Sprintf("limits:\n  - name: global\n    key: global\n    capacity: %d\n    refill_per_second: %v\n", B, r))
	store := "redis://" + srv.Addr
	a := serve(t, "--config", pol, "--store", store)
	b := serve(t, "--config", pol, "--store", store)
	start := time.Now()
	until := start.Add(3 * time.Second)
	admitted, refused, other := hammer(t, []*proc{a, b}, 16, `{"descriptors":{}}`, until)
	elapsed := time.Since(start)
	// At most what the bucket allows until the last answer; at least 99% of
	// what it allows until the last request is sent (the load runs that long).
	upper, lower := B+r*elapsed.Seconds(), 0.99*(B+r*until.Sub(start).Seconds())
	t.Logf("admitted %d, refused %d, other %d in %v; B + r*t = %.1f", admitted, refused, other, elapsed, upper)
	if other != 0 {
		t.Fatalf("%d requests failed", other)
	}
	if float64(admitted) > upper || float64(admitted) < lower {
		t.Fatalf("admitted %d, want within [%.1f, %.1f]", admitted, lower, upper)
	}
	if refused < admitted {
		t.Fatalf("the load did not exceed the budget (refused %d)", refused)
	}
}

// A retried request_id is answered, not charged, by any instance; a lease
// taken on one instance is settled and released on another.
func TestServeRedisIdempotencyAndSettleAcrossInstances(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, `limits:
  - name: tokens
    key: "tenant:{tenant}"
    capacity: 100
    refill_per_second: 0.001
  - name: tools
    key: "tenant:{tenant}"
    max_in_flight: 1
    lease_ttl: 1m
`)
	store := "redis://" + srv.Addr
	a := serve(t, "--config", pol, "--store", store)
	b := serve(t, "--config", pol, "--store", store)
	remaining := func(p *proc) float64 {
		_, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"acme"},"cost":0}`)
		var res struct {
			Limits []struct {
				Name string  `json:"name"`
				Left float64 `json:"tokens_remaining"`
			} `json:"limits"`
		}
		json.Unmarshal([]byte(body), &res)
		return res.Limits[0].Left
	}
	req := `{"descriptors":{"tenant":"acme"},"cost":30,"request_id":"r-1"}`
	code, first := call(t, a, "POST", "/v1/check", req)
	if code != 200 {
		t.Fatalf("%d %s", code, first)
	}
	code, again := call(t, b, "POST", "/v1/check", req)
	if code != 200 || again != first {
		t.Fatalf("retry on the other instance: %d %s, first %s", code, again, first)
	}
	if left := remaining(b); left != 70 {
		t.Fatalf("remaining %v after a request and its retry (charged twice?)", left)
	}
	var res struct {
		Lease string `json:"lease"`
	}
	json.Unmarshal([]byte(first), &res)
	// The in-flight slot is held: another check is refused everywhere.
	if code, body := call(t, b, "POST", "/v1/check", `{"descriptors":{"tenant":"acme"}}`); code != 429 {
		t.Fatalf("slot held: %d %s", code, body)
	}
	if code, body := call(t, b, "POST", "/v1/settle", fmt.Sprintf(`{"lease":%q,"actual_cost":5}`, res.Lease)); code != 200 {
		t.Fatalf("settle on b: %d %s", code, body)
	}
	if left := remaining(a); left != 95 {
		t.Fatalf("remaining %v after settling 30 -> 5", left)
	}
	if code, _ := call(t, a, "POST", "/v1/settle", fmt.Sprintf(`{"lease":%q,"actual_cost":5}`, res.Lease)); code != 409 {
		t.Fatalf("second settle on a: %d, want 409", code)
	}
	if code, body := call(t, a, "POST", "/v1/release", fmt.Sprintf(`{"lease":%q}`, res.Lease)); code != 200 {
		t.Fatalf("release on a: %d %s", code, body)
	}
	if code, body := call(t, b, "POST", "/v1/check", `{"descriptors":{"tenant":"acme"}}`); code != 200 {
		t.Fatalf("after release: %d %s", code, body)
	}
}

// Redis killed mid-load and restarted: each --on-store-error mode behaves
// as documented, no request waits past its deadline, /readyz follows the
// store, and the service returns to Redis without a restart.
func TestServeRedisFailureModes(t *testing.T) {
	for _, tc := range []struct {
		mode string
		args []string
		want func(admitted, refused, unavailable int64) bool
	}{
		{"fail_open", nil, func(a, r, u int64) bool { return a == 40 && u == 0 }},
		{"fail_closed", nil, func(a, r, u int64) bool { return a == 0 && u == 40 }},
		// local: the share (20 / 4) starts from the level Redis last
		// reported, drained (0; 0.001/s refills nothing here): all refused.
		{"local", []string{"--instances", "4"}, func(a, r, u int64) bool { return a == 0 && r == 40 }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			srv := startRedis(t)
			pol := filepath.Join(t.TempDir(), "p.yaml")
			writePolicy(t, pol, "limits:\n  - name: g\n    key: \"t:{t}\"\n    capacity: 20\n    refill_per_second: 0.001\n")
			p := serve(t, append([]string{"--config", pol, "--store", "redis://" + srv.Addr, "--store-timeout", "200ms",
				"--on-store-error", tc.mode}, tc.args...)...)
			if code, body := call(t, p, "GET", "/readyz", ""); code != 200 {
				t.Fatalf("readyz: %d %s", code, body)
			}
			// Drain the key in Redis.
			for range 20 {
				if code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"x"}}`); code != 200 {
					t.Fatalf("%d %s", code, body)
				}
			}
			srv.Kill()
			// Every check here is one the refusal cache refuses (the key is
			// drained): it finds Redis gone when its liveness window has
			// passed (250 ms after Redis last answered), then the mode
			// decides (docs/behaviour.md 5.4).
			time.Sleep(300 * time.Millisecond)
			var a, r, u int64
			for range 40 {
				start := time.Now()
				code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"x"}}`)
				if d := time.Since(start); d > time.Second {
					t.Fatalf("a check took %v with Redis down", d)
				}
				switch code {
				case 200:
					a++
				case 429:
					r++
				case 503:
					u++
					if !strings.Contains(body, "store_error") {
						t.Fatalf("503 body %s", body)
					}
				default:
					t.Fatalf("%d %s", code, body)
				}
			}
			if !tc.want(a, r, u) {
				t.Fatalf("%s with Redis down: admitted %d, refused %d, unavailable %d", tc.mode, a, r, u)
			}
			// Ready while every limit can be answered by its mode; not
			// under fail_closed.
			wantCode, wantStatus := 200, `"status":"degraded"`
			if tc.mode == "fail_closed" {
				wantCode, wantStatus = 503, `"status":"unavailable"`
			}
			if code, body := call(t, p, "GET", "/readyz", ""); code != wantCode || !strings.Contains(body, wantStatus) {
				t.Fatalf("readyz %d %s with Redis down", code, body)
			}
			p.waitLog(t, "store unreachable")
			_, metrics := call(t, p, "GET", "/metrics", "")
			if !strings.Contains(metrics, "sluice_store_degraded 1") {
				t.Fatal("degraded gauge not set")
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				code, body := call(t, p, "GET", "/readyz", "")
				if code == 200 && strings.Contains(body, `"status":"ready"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("readyz did not recover")
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Redis (empty after the restart) decides again: 20 admitted, then
			// refused. In local mode x was handed back drained (its local
			// level, 0): a new key shows Redis deciding (the local share is 5).
			key := "x"
			if tc.mode == "local" {
				if code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"x"}}`); code != 429 {
					t.Fatalf("after recovery, x (handed back drained): %d %s", code, body)
				}
				key = "y"
			}
			for i := range 21 {
				code, body := call(t, p, "POST", "/v1/check", fmt.Sprintf(`{"descriptors":{"t":%q}}`, key))
				if want := map[bool]int{true: 200, false: 429}[i < 20]; code != want {
					t.Fatalf("after recovery, check %d: %d %s", i, code, body)
				}
			}
			p.waitLog(t, "store reachable again")
		})
	}
}

// A frozen Redis (SIGSTOP) holds no request past the store timeout.
func TestServeRedisPausedTimesOut(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: g\n    key: \"t:{t}\"\n    capacity: 20\n    refill_per_second: 1\n")
	p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--store-timeout", "200ms", "--on-store-error", "fail_closed")
	if code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"x"}}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	srv.Pause()
	defer srv.Resume()
	for range 10 {
		start := time.Now()
		code, _ := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"x"}}`)
		if d := time.Since(start); d > 700*time.Millisecond || code != 503 {
			t.Fatalf("frozen Redis: %d after %v", code, d)
		}
	}
	srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors":{"t":"x"}}`); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no recovery after SIGCONT")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With --lease-tokens the instances still never admit more than B + r*t
// together; they lose at most what the leases strand. The rate is low
// enough that 16 clients outrun it even on a busy machine (the lower
// bound means something only while requests are refused).
func TestServeRedisLeasedTokens(t *testing.T) {
	srv := startRedis(t)
	const B, r = 200, 300.0
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, fmt.Sprintf("limits:\n  - name: global\n    key: global\n    capacity: %d\n    refill_per_second: %v\n", B, r))
	args := []string{"--config", pol, "--store", "redis://" + srv.Addr, "--lease-tokens", "--lease-ttl", "200ms"}
	a := serve(t, args...)
	b := serve(t, args...)
	start := time.Now()
	admitted, refused, other := hammer(t, []*proc{a, b}, 16, `{"descriptors":{}}`, start.Add(2*time.Second))
	elapsed := time.Since(start)
	bound := B + r*elapsed.Seconds()
	t.Logf("leased: admitted %d, refused %d, other %d in %v; B + r*t = %.1f", admitted, refused, other, elapsed, bound)
	if other != 0 || float64(admitted) > bound || float64(admitted) < bound-2*B/4-r*0.05 {
		t.Fatalf("admitted %d (other %d), want <= %.1f and >= %.1f", admitted, other, bound, bound-2*B/4-r*0.05)
	}
	if refused == 0 {
		t.Fatalf("no request was refused: the clients did not outrun the rate, so the lower bound says nothing")
	}
	if code, _ := call(t, a, "GET", "/readyz", ""); code != 200 {
		t.Fatal("readyz with leasing")
	}
}

// Redis killed (SIGKILL) while 8 clients load the service, then restarted
// under the same load: no request waits past the store timeout (plus
// slack), each mode answers as documented, and decisions return to Redis.
func TestServeRedisKilledUnderLoad(t *testing.T) {
	for _, mode := range []string{"fail_open", "fail_closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			srv := startRedis(t)
			pol := filepath.Join(t.TempDir(), "p.yaml")
			// g carries the load; probe tells Redis from the fallbacks: on
			// Redis a new key admits 2 and refuses the 3rd; fail_open admits
			// all; local (2 instances) admits 1.
			writePolicy(t, pol, "limits:\n  - name: g\n    key: \"t:{t}\"\n    capacity: 1000000\n    refill_per_second: 1000000\n"+
				"  - name: probe\n    key: \"p:{p}\"\n    capacity: 2\n    refill_per_second: 0.001\n")
			p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--store-timeout", "200ms", "--on-store-error", mode, "--instances", "2")
			onRedis := func(n int) bool {
				body := fmt.Sprintf(`{"descriptors":{"p":"probe-%d"}}`, n)
				c1, _ := call(t, p, "POST", "/v1/check", body)
				c2, _ := call(t, p, "POST", "/v1/check", body)
				c3, _ := call(t, p, "POST", "/v1/check", body)
				return c1 == 200 && c2 == 200 && c3 == 429
			}
			if !onRedis(-1) {
				t.Fatal("the probe does not see Redis before the outage")
			}
			type result struct {
				at, took time.Duration
				code     int
			}
			var mu sync.Mutex
			var results []result
			start := time.Now()
			stop := make(chan struct{})
			client := &http.Client{Timeout: 3 * time.Second}
			var wg sync.WaitGroup
			for g := range 8 {
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
						resp, err := client.Post(p.addr+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"descriptors":{"t":"k%d"}}`, (g*100+i)%50)))
						code := 0
						if err == nil {
							code = resp.StatusCode
							resp.Body.Close()
						}
						mu.Lock()
						results = append(results, result{t0.Sub(start), time.Since(t0), code})
						mu.Unlock()
					}
				}()
			}
			time.Sleep(500 * time.Millisecond)
			srv.Kill()
			killedAt := time.Since(start)
			time.Sleep(800 * time.Millisecond)
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			restartedAt := time.Since(start)
			// Wait until the service decides on Redis again (a key drained in
			// Redis is refused), with the load still running.
			recovered := time.Duration(0)
			for n, deadline := 0, time.Now().Add(10*time.Second); time.Now().Before(deadline); n++ {
				if onRedis(n) {
					recovered = time.Since(start) - restartedAt
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			close(stop)
			wg.Wait()
			if recovered == 0 {
				t.Fatal("decisions did not return to Redis within 10 s of the restart")
			}
			var during, after, unavailable, other int
			var worst time.Duration
			for _, r := range results {
				worst = max(worst, r.took)
				switch {
				case r.code != 200 && r.code != 429 && r.code != 503:
					other++
				case r.code == 503:
					unavailable++
				}
				if r.at > killedAt+300*time.Millisecond && r.at < restartedAt {
					during++
				}
				if r.at > restartedAt+recovered && r.code == 200 {
					after++
				}
			}
			t.Logf("%s: %d requests, %d during the outage, back on Redis %v after the restart, %d admitted since, %d unavailable, slowest %v",
				mode, len(results), during, recovered, after, unavailable, worst)
			if worst > time.Second {
				t.Fatalf("a request took %v with a 200 ms store timeout", worst)
			}
			if other != 0 || during == 0 || after == 0 {
				t.Fatalf("other errors %d, requests during the outage %d, admitted after recovery %d", other, during, after)
			}
			switch mode {
			case "fail_closed":
				if unavailable == 0 {
					t.Fatal("fail_closed answered no 503 while Redis was down")
				}
			default:
				if unavailable != 0 {
					t.Fatalf("%s answered %d times 503", mode, unavailable)
				}
			}
		})
	}
}

// sluice serve on a real 3-master Redis Cluster: limits with a hash_tag
// share a slot (one script), the global limit lives elsewhere (reserve and
// refund across slots); keys carry --store-prefix.
func TestServeRedisCluster(t *testing.T) {
	cl := redistest.NewCluster(t, 3)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, `limits:
  - name: global
    key: global
    capacity: 1000
    refill_per_second: 0.001
  - name: tenant
    key: "tenant:{tenant}"
    hash_tag: "{tenant}"
    capacity: 3
    refill_per_second: 0.001
  - name: tenant_user
    key: "tenant:{tenant}:user:{user}"
    hash_tag: "{tenant}"
    capacity: 100
    refill_per_second: 0.001
`)
	p := serve(t, "--config", pol, "--store", "redis+cluster://"+strings.Join(cl.Addrs(), ","), "--store-prefix", "edge:")
	check := func(tenant, user string) (int, map[string]float64) {
		code, body := call(t, p, "POST", "/v1/check", fmt.Sprintf(`{"descriptors":{"tenant":%q,"user":%q}}`, tenant, user))
		var res struct {
			Limits []struct {
				Name string  `json:"name"`
				Left float64 `json:"tokens_remaining"`
			} `json:"limits"`
		}
		json.Unmarshal([]byte(body), &res)
		left := map[string]float64{}
		for _, l := range res.Limits {
			left[l.Name] = l.Left
		}
		return code, left
	}
	for i := range 3 {
		if code, _ := check("acme", fmt.Sprint("u", i)); code != 200 {
			t.Fatalf("check %d: %d", i, code)
		}
	}
	// acme's tenant bucket is empty: refused, and neither the global
	// bucket (another slot) nor the user bucket (same slot) is charged.
	for range 5 {
		if code, _ := check("acme", "u9"); code != 429 {
			t.Fatalf("over the tenant limit: %d", code)
		}
	}
	if code, left := check("globex", "u1"); code != 200 || left["global"] != 1000-4 || left["tenant_user"] != 99 {
		t.Fatalf("after refusals: %d %v (global must have lost 4: 3 for acme, 1 now)", code, left)
	}
	// Every key is under the prefix, with the tenant limits' tag.
	n := 0
	for _, addr := range cl.Addrs() {
		out, err := exec.Command(testbin.Need(t, testbin.RedisCLI), "-u", "redis://"+addr, "--scan", "--pattern", "edge:*").Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Fields(string(out)) {
			n++
			if strings.Contains(k, "tenant") && !strings.Contains(k, "{acme}") && !strings.Contains(k, "{globex}") {
				t.Errorf("tenant key without its hash tag: %s", k)
			}
		}
	}
	if n < 5 {
		t.Fatalf("%d keys under the prefix", n)
	}
}

// Bad store settings stop serve at once with an error naming them; nothing
// starts listening.
func TestServeBadStoreSettings(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "memcached://127.0.0.1:1"}, "scheme"},
		{[]string{"--store", "redis://"}, "no host"},
		{[]string{"--store", "redis://127.0.0.1:1/notadb"}, "database"},
		{[]string{"--store", "redis://127.0.0.1:1", "--store-prefix", "a{b}:"}, "prefix"},
		{[]string{"--store", "redis://127.0.0.1:1", "--store-timeout", "0s"}, "timeout"},
		{[]string{"--store", "redis://127.0.0.1:1", "--instances", "0"}, "instances"},
		{[]string{"--store", "redis://127.0.0.1:1", "--on-store-error", "shrug"}, "on-store-error"},
	} {
		cmd := exec.Command(binary, append([]string{"serve", "--config", pol, "--http", "127.0.0.1:0"}, tc.args...)...)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%v: serve started", tc.args)
		}
		if err == nil || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "sluice serving") {
			t.Errorf("%v: %v\n%s", tc.args, err, out)
		}
	}
}

// A Redis that is down when serve starts: serve starts degraded (logged,
// /readyz 503, fail_closed refusing), and decides on Redis once it answers.
func TestServeStartsWithRedisDown(t *testing.T) {
	srv := startRedis(t)
	srv.Kill()
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--store-timeout", "200ms", "--on-store-error", "fail_closed")
	p.waitLog(t, "store unreachable")
	if code, _ := call(t, p, "GET", "/readyz", ""); code != 503 {
		t.Fatalf("readyz %d with Redis down", code)
	}
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"a"}}`); code != 503 {
		t.Fatalf("fail_closed with Redis down: %d", code)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"a"}}`); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never decided on Redis")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := call(t, p, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz %d once Redis answers", code)
	}
}
