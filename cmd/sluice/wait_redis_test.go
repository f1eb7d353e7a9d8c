package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// redisScriptCalls is a Redis's count of calls of sluice's decision
// functions so far (INFO commandstats: FCALL; the lease book's own scripts
// are EVALSHA and not counted).
func redisScriptCalls(t *testing.T, addr string) int64 {
	t.Helper()
	calls, err := redistest.CommandCalls(addr)
	if err != nil {
		t.Fatal(err)
	}
	return calls["fcall"]
}

// Four sluice serve processes on one Redis book on one key in turn, costs
// 1 and 20 mixed ("reserve": true: each answer says when to act): the turns
// follow the booking order exactly, each comes its own cost's refill after
// the one before (a cost of 20 waits no longer than its place in line), so
// the admissions over any interval stay within B + r*t.
func TestServeRedisFIFOAcrossInstances(t *testing.T) {
	srv := startRedis(t)
	const r = 100.0 // tokens per second, capacity 20
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: hot\n    key: \"k:{k}\"\n    capacity: 20\n    refill_per_second: 100\n")
	var procs []*proc
	for range 4 {
		procs = append(procs, serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--max-wait", "60s"))
	}
	if code, body := call(t, procs[0], "POST", "/v1/check", `{"descriptors": {"k": "x"}, "cost": 20}`); code != 200 {
		t.Fatalf("emptying: %d %s", code, body)
	}
	// A turn's due time on this host's clock lies between sending plus its
	// wait (ms, rounded up: at most 1 ms late) and receiving plus its wait.
	type turn struct {
		cost   int
		lo, hi time.Time
	}
	var turns []turn
	for i := range 40 {
		cost := 1
		if i%5 == 2 {
			cost = 20
		}
		sent := time.Now()
		code, body := call(t, procs[i%4], "POST", "/v1/check", fmt.Sprintf(`{"descriptors": {"k": "x"}, "cost": %d, "max_wait_ms": 60000, "reserve": true}`, cost))
		recv := time.Now()
		var res struct {
			Allowed bool   `json:"allowed"`
			WaitMS  *int64 `json:"wait_ms"`
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil || code != 200 || !res.Allowed || res.WaitMS == nil {
			t.Fatalf("booking %d: %d %s", i, code, body)
		}
		w := time.Duration(*res.WaitMS) * time.Millisecond
		turns = append(turns, turn{cost, sent.Add(w - time.Millisecond), recv.Add(w)})
	}
	// Each turn comes exactly cost/r after the previous one (FIFO by
	// booking): the bounds of their due times must allow that gap. (With
	// 2 ms of slack: the due times are on Redis' wall clock, the bounds on
	// this process's monotonic one, and a VM's wall clock is slewed.)
	const slack = 2 * time.Millisecond
	for k := 1; k < len(turns); k++ {
		want := time.Duration(float64(turns[k].cost) / r * float64(time.Second))
		minGap, maxGap := turns[k].lo.Sub(turns[k-1].hi)-slack, turns[k].hi.Sub(turns[k-1].lo)+slack
		if want < minGap || want > maxGap {
			t.Errorf("turn %d (cost %d): %v to %v after turn %d, want %v (FIFO by booking)", k, turns[k].cost, minGap, maxGap, k-1, want)
		}
	}
	total := 0
	for _, tr := range turns[1:] {
		total += tr.cost
	}
	if span := turns[len(turns)-1].hi.Sub(turns[0].lo); float64(total) > 20+r*span.Seconds() {
		t.Fatalf("%d tokens admitted over %v: more than B + r*t", total, span)
	}
}

// 200 concurrent waiters (max_wait_ms, held) on one hot key through one
// sluice serve on Redis make about one store round trip each, and all are
// admitted in turn.
func TestServeRedisWaitersOneRoundTripEach(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: hot\n    key: \"k:{k}\"\n    capacity: 1\n    refill_per_second: 1000\n")
	p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--max-wait", "60s", "--max-waiting", "1000")
	call(t, p, "POST", "/v1/check", `{"descriptors": {"k": "x"}}`) // empty it
	before := redisScriptCalls(t, srv.Addr)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var mu sync.Mutex
	admitted, other := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for range 200 {
		wg.Go(func() {
			resp, err := client.Post(p.addr+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {"k": "x"}, "max_wait_ms": 30000}`))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				other++
				return
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				admitted++
			} else {
				other++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	calls := redisScriptCalls(t, srv.Addr) - before
	t.Logf("200 waiters: %d admitted in %v, %d decision calls", admitted, elapsed, calls)
	if admitted != 200 || other != 0 {
		t.Fatalf("admitted %d, other %d", admitted, other)
	}
	if calls > 220 {
		t.Fatalf("%d decision calls for 200 waiters: more than ~1 round trip each", calls)
	}
	if elapsed < 199*time.Millisecond {
		t.Fatalf("200 tokens at 1000/s admitted in %v: faster than the bucket allows", elapsed)
	}
}

// A pause posted to one sluice serve instance delays checks on another on
// the same Redis until it passes; after it the bucket refills from empty.
func TestServeRedisPauseAcrossInstances(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: rpm\n    key: \"api_key:{api_key}\"\n    capacity: 10\n    refill_per_second: 10\n")
	a := serve(t, "--config", pol, "--store", "redis://"+srv.Addr)
	b := serve(t, "--config", pol, "--store", "redis://"+srv.Addr)
	check := `{"descriptors": {"api_key": "k"}}`
	if code, body := call(t, b, "POST", "/v1/check", check); code != 200 {
		t.Fatalf("before: %d %s", code, body)
	}
	start := time.Now()
	code, body := call(t, a, "POST", "/v1/pause", `{"descriptors": {"api_key": "k"}, "retry_after_ms": 700}`)
	if code != 200 || !strings.Contains(body, "paused_until_ms") {
		t.Fatalf("pause: %d %s", code, body)
	}
	code, body = call(t, b, "POST", "/v1/check", check)
	var res struct {
		RetryAfterMS int64 `json:"retry_after_ms"`
	}
	json.Unmarshal([]byte(body), &res)
	// the pause's rest plus one token (100 ms), on Redis's clock
	if lo := 800 - time.Since(start).Milliseconds() - 1; code != 429 || res.RetryAfterMS > 800 || res.RetryAfterMS < lo {
		t.Fatalf("instance b during a's pause: %d %s (want 429, retry_after_ms in [%d, 800])", code, body, lo)
	}
	time.Sleep(time.Duration(res.RetryAfterMS) * time.Millisecond)
	code, body = call(t, b, "POST", "/v1/check", check)
	var after struct {
		Limits []struct {
			TokensRemaining int64 `json:"tokens_remaining"`
		} `json:"limits"`
	}
	json.Unmarshal([]byte(body), &after)
	if code != 200 || len(after.Limits) != 1 || after.Limits[0].TokensRemaining > 6 { // (up to 500 ms of slack; 9 were left before)
		t.Fatalf("after the pause the bucket refills from empty: %d %s", code, body)
	}
}
