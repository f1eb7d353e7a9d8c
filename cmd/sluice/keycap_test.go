// The key cap through a real sluice serve: exact, and a flood of new keys locks nobody out.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// --max-keys N holds exactly N distinct keys whatever their hashes; a new
// key beyond them is admitted, a key with state evicted (none being idle;
// the CLOCK hand's choice), and sluice_evictions_total counts it as reason
// "lru".
func TestServeMaxKeysIsExact(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	// A key is full (idle) again 5 s after its check: none is idle before
	// the 101st arrives, even on a busy machine.
	writePolicy(t, pol, "limits:\n  - name: t\n    key: \"tenant:{tenant}\"\n    capacity: 1\n    refill_per_second: 0.2\n")
	p := serve(t, "--config", pol, "--max-keys", "100")
	for i := range 101 {
		if code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "t`+fmt.Sprint(i)+`"}, "cost": 1}`); code != 200 {
			t.Fatalf("tenant %d of 101: %d %s", i, code, body)
		}
	}
	m := metrics(t, p)
	if m[`sluice_keys`] != 100 || m[`sluice_evictions_total{reason="lru"}`] != 1 || m[`sluice_evictions_total{reason="idle"}`] != 0 {
		t.Fatalf("keys %v, evictions lru %v idle %v", m[`sluice_keys`], m[`sluice_evictions_total{reason="lru"}`], m[`sluice_evictions_total{reason="idle"}`])
	}
	// One of t0..t99 was evicted (which one: the CLOCK hand's order, see
	// docs/behaviour.md 4.3): a peek finds exactly one full bucket, and it
	// starts anew.
	var anew []string
	for i := range 100 {
		tenant := "t" + fmt.Sprint(i)
		code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "`+tenant+`"}, "cost": 0}`)
		if code != 200 {
			t.Fatalf("peek %s: %d %s", tenant, code, body)
		}
		if strings.Contains(body, `"tokens_remaining":1`) {
			anew = append(anew, tenant)
		}
	}
	if len(anew) != 1 {
		t.Fatalf("tenants with a full bucket after one eviction: %v", anew)
	}
	if code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "`+anew[0]+`"}}`); code != 200 {
		t.Fatalf("%s after its eviction: %d %s", anew[0], code, body)
	}
}

// metrics reads /metrics into series → value.
func metrics(t *testing.T, p *proc) map[string]float64 {
	t.Helper()
	_, body := call(t, p, "GET", "/metrics", "")
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// flood sends checks with distinct users from 16 keep-alive clients until
// the function it returns is called, which returns the answers' counts by
// status (a transport error counts as status 0).
func flood(t *testing.T, p *proc, body func(n int64) string) func() map[int]int {
	var n atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var once sync.Once
	end := func() map[int]int {
		once.Do(func() { close(stop) })
		wg.Wait()
		return codes
	}
	t.Cleanup(func() { end() }) // (before the server is killed: cleanups run last first)
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := cl.Post(p.addr+"/v1/check", "application/json", strings.NewReader(body(n.Add(1))))
				if err != nil {
					mu.Lock()
					codes[0]++
					mu.Unlock()
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	return end
}

// checkRemaining posts a check and returns its status, its body and the
// named limit's tokens_remaining (-1: not in the answer).
func checkRemaining(t *testing.T, p *proc, body, limit string) (int, string, int64) {
	t.Helper()
	code, out := call(t, p, "POST", "/v1/check", body)
	var res struct {
		Limits []struct {
			Name      string `json:"name"`
			Remaining int64  `json:"tokens_remaining"`
		} `json:"limits"`
	}
	json.Unmarshal([]byte(out), &res)
	for _, l := range res.Limits {
		if l.Name == limit {
			return code, out, l.Remaining
		}
	}
	return code, out, -1
}

// The flood: --max-keys 1000, a 24 h window per user, 16 clients
// inventing users for 3 s (before LRU eviction, every key past the
// 1,000th, and a tenant evicted once its bucket was full, got 503
// store_full with a Retry-After of a day). A legitimate tenant, and new
// legitimate users, keep being admitted during the flood and after it,
// and so is every flood request: nobody is answered 503.
func TestServeKeyFloodLocksNobodyOut(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, `limits:
  - name: tenant
    key: "tenant:{tenant}"
    capacity: 100
    refill_per_second: 50
  - name: user_daily
    key: "user:{user}"
    algorithm: sliding_window
    limit: 1000
    window: 24h
`)
	p := serve(t, "--config", pol, "--max-keys", "1000")
	legit := func(phase string, i int) {
		body := `{"descriptors": {"tenant": "acme", "user": "alice"}}`
		if i%5 == 4 {
			body = `{"descriptors": {"tenant": "acme", "user": "new-` + phase + fmt.Sprint(i) + `"}}`
		}
		if code, out := call(t, p, "POST", "/v1/check", body); code != 200 {
			t.Fatalf("%s: legitimate request %d (%s): %d %s", phase, i, body, code, out)
		}
	}
	wait := flood(t, p, func(n int64) string { return `{"descriptors": {"user": "flood-` + fmt.Sprint(n) + `"}}` })
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		legit("during", i)
		time.Sleep(50 * time.Millisecond)
	}
	codes := wait()
	for i := range 20 {
		legit("after", i)
		time.Sleep(20 * time.Millisecond)
	}
	m := metrics(t, p)
	lru := m[`sluice_evictions_total{reason="lru"}`]
	t.Logf("flood answers %v in 3 s; keys %v, evictions lru %v idle %v", codes, m["sluice_keys"], lru, m[`sluice_evictions_total{reason="idle"}`])
	if codes[200] < 1200 || len(codes) != 1 {
		t.Fatalf("flood answers %v: want at least 1,200, all 200", codes)
	}
	if m["sluice_keys"] > 1000 || lru < float64(codes[200]-1000) {
		t.Fatalf("keys %v, lru evictions %v for %d new keys", m["sluice_keys"], lru, codes[200])
	}
}

// With new_key_gate, a flood of new users under one tenant is held back by
// that tenant's limit (429, creating no key), and another tenant's user
// keeps its keys and their state: her window's count goes down by exactly
// one a request, during the flood and after it, and nothing is evicted.
func TestServeKeyFloodBehindAGate(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, `limits:
  - name: tenant
    key: "tenant:{tenant}"
    capacity: 50
    refill_per_second: 1
  - name: user_daily
    key: "user:{tenant}:{user}"
    algorithm: sliding_window
    limit: 1000
    window: 24h
    new_key_gate: tenant
`)
	p := serve(t, "--config", pol, "--max-keys", "100")
	alice := `{"descriptors": {"tenant": "acme", "user": "alice"}}`
	_, _, left := checkRemaining(t, p, alice, "user_daily")
	next := func(phase string) {
		code, out, rem := checkRemaining(t, p, alice, "user_daily")
		if code != 200 || rem != left-1 {
			t.Fatalf("%s the flood: %d %s; want 200 with %d left (her state kept)", phase, code, out, left-1)
		}
		left = rem
	}
	wait := flood(t, p, func(n int64) string {
		return `{"descriptors": {"tenant": "flood", "user": "u` + fmt.Sprint(n) + `"}}`
	})
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		next("during")
		time.Sleep(50 * time.Millisecond)
	}
	codes := wait()
	next("after")
	m := metrics(t, p)
	t.Logf("flood answers %v; keys %v, evictions %v", codes, m["sluice_keys"], m[`sluice_evictions_total{reason="lru"}`])
	if codes[429] < 1000 || codes[200] > 60 || len(codes) != 2 {
		t.Fatalf("flood answers %v: want the tenant limit's 50 (and about 1 a second) admitted, the rest 429", codes)
	}
	if m[`sluice_evictions_total{reason="lru"}`] != 0 || m["sluice_keys"] > 100 {
		t.Fatalf("keys %v, lru evictions %v: the gated flood must evict nothing", m["sluice_keys"], m[`sluice_evictions_total{reason="lru"}`])
	}
}
