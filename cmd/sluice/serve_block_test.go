// Black-box test of the penalty box (block_for) on two instances of sluice
// serve sharing one Redis: a policy limit's and an override's.

package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

const blockPolicy = `limits:
  - name: login
    key: "user:{user}"
    capacity: 3
    refill_per_second: 3
    block_for: 3s
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 2
    refill_per_second: 2
`

// A key refused on A is refused on B until its block ends, retry_after_ms
// counting down to the end on both though the bucket refills in 1 s;
// an override's block_for set through A blocks on B the same way.
func TestServeRedisPenaltyBox(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, blockPolicy)
	store := "redis://" + srv.Addr
	a := serve(t, "--config", pol, "--store", store)
	b := serve(t, "--config", pol, "--store", store)
	check := func(p *proc, desc string) (int, int64) {
		t.Helper()
		code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {`+desc+`}}`)
		var r struct {
			RetryAfterMs int64 `json:"retry_after_ms"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%d %s: %v", code, body, err)
		}
		return code, r.RetryAfterMs
	}
	blocked := func(desc string, block time.Duration, refusedAt time.Time) {
		t.Helper()
		last := int64(block / time.Millisecond)
		for time.Since(refusedAt) < block-300*time.Millisecond {
			for name, p := range map[string]*proc{"A": a, "B": b} {
				code, ms := check(p, desc)
				left := (block - time.Since(refusedAt)).Milliseconds()
				if code != 429 || ms > last+5 || ms < left-200 {
					t.Fatalf("%s %v into the block: %d, retry_after_ms %d (before %d, about %d left)", name, time.Since(refusedAt), code, ms, last, left)
				}
				last = ms
			}
			time.Sleep(150 * time.Millisecond) // the bucket refills meanwhile
		}
		time.Sleep(block - time.Since(refusedAt) + 50*time.Millisecond)
		for name, p := range map[string]*proc{"A": a, "B": b} {
			if code, ms := check(p, desc); code != 200 {
				t.Fatalf("%s after the block: %d (retry_after_ms %d)", name, code, ms)
			}
		}
	}
	for range 3 {
		if code, _ := check(a, `"user": "alice"`); code != 200 {
			t.Fatalf("within capacity: %d", code)
		}
	}
	code, ms := check(a, `"user": "alice"`)
	refused := time.Now()
	if code != 429 || ms < 2900 || ms > 3000 {
		t.Fatalf("the refusal that blocks: %d, retry_after_ms %d", code, ms)
	}
	blocked(`"user": "alice"`, 3*time.Second, refused)

	if code, body := call(t, a, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "acme"}, "block_for": "2s"}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	time.Sleep(time.Second) // B's sync: within 1 s
	check(b, `"tenant": "acme"`)
	check(b, `"tenant": "acme"`)
	if code, ms := check(b, `"tenant": "acme"`); code != 429 || ms < 1900 {
		t.Fatalf("the override's refusal on B: %d, retry_after_ms %d", code, ms)
	}
	blocked(`"tenant": "acme"`, 2*time.Second, time.Now())
}
