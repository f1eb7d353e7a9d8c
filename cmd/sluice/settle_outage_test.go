// envoy_settle through sluice serve while its Redis is frozen (SIGSTOP)
// or refusing writes (maxmemory): bookings made in process during a
// freeze settle after it, the first call of a freeze waits one store
// timeout, and a Redis at maxmemory decides calls as without envoy_settle.

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// settleOutagePolicy: 10,000 tokens (a refill too slow to show within a
// test), each request path booking 2,000.
const settleOutagePolicy = `limits:
  - name: tokens
    key: "user:{user}"
    capacity: 10000
    refill_per_second: 0.001
    envoy_settle: {by: request_id, estimate: 2000}
`

// settleLeft is the tokens left to a peek (no id, hits_addend 0).
func settleLeft(t *testing.T, c rls.RateLimitServiceClient, user string) uint32 {
	t.Helper()
	return settleCall(t, c, user, "", 0).Statuses[0].LimitRemaining
}

func TestSettleOutageFrozenRedis(t *testing.T) {
	r := redistest.New(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, settleOutagePolicy)
	p := serve(t, "--config", pol, "--grpc", "127.0.0.1:0", "--store", "redis://"+r.Addr,
		"--on-store-error", "local", "--store-timeout", "250ms", "--refusal-cache", "0")
	_, c := dialRLS(t, p)
	settleCall(t, c, "u1", "", 1) // (the key exists on Redis: 9,999 left)
	r.Pause()
	defer r.Resume()
	// The request path that finds Redis frozen waits one store timeout
	// (its claim), not two (its claim, then its decision), and books in
	// process.
	start := time.Now()
	resp := settleCall(t, c, "u1", "F1", 0)
	if d := time.Since(start); d > 250*time.Millisecond+150*time.Millisecond {
		t.Errorf("the first envoy_settle call of a freeze took %v (store timeout 250ms)", d)
	}
	if resp.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("request path F1 with Redis frozen: %v", resp)
	}
	// A second one, degraded already: at once.
	start = time.Now()
	if resp := settleCall(t, c, "u1", "F2", 0); resp.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("request path F2 with Redis frozen: %v", resp)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("an envoy_settle call while degraded took %v", d)
	}
	if got := settleLeft(t, c, "u1"); got != 5999 {
		t.Fatalf("%d left in process after two bookings, want 5999", got)
	}
	r.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, m := call(t, p, "GET", "/metrics", ""); strings.Contains(m, "sluice_store_degraded 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no recovery after SIGCONT")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Back on Redis (handed the in-process level, 5,999): the stream-done
	// calls settle the bookings made in process.
	if got := settleLeft(t, c, "u1"); got != 5999 {
		t.Fatalf("%d left on Redis after recovery, want 5999 (the local level handed back)", got)
	}
	for _, sd := range []struct {
		id   string
		used uint64
	}{{"F1", 100}, {"F2", 2500}} {
		if resp := settleCall(t, c, "u1", sd.id, sd.used); resp.OverallCode != rls.RateLimitResponse_OK {
			t.Fatalf("stream-done %s after recovery: %v", sd.id, resp)
		}
	}
	if got, want := settleLeft(t, c, "u1"), uint32(10000-1-100-2500); got != want {
		t.Fatalf("%d left after the stream-done calls, want %d (each booking settled to its usage)", got, want)
	}
	// Settled once: a third call with F1 is charged as any (100).
	settleCall(t, c, "u1", "F1", 100)
	if got, want := settleLeft(t, c, "u1"), uint32(10000-1-100-2500-100); got != want {
		t.Fatalf("%d left after a third call, want %d", got, want)
	}
}

func TestSettleOutageRedisAtMaxmemory(t *testing.T) {
	r := startRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, settleOutagePolicy)
	p := serve(t, "--config", pol, "--grpc", "127.0.0.1:0", "--store", "redis://"+r.Addr, "--refusal-cache", "0")
	_, c := dialRLS(t, p)
	settleCall(t, c, "u1", "", 1) // (the key exists: decided at maxmemory)
	fillToOOM(t, r.Addr)
	// The id cannot be claimed (its claim is a new key): the request path
	// is decided as without envoy_settle (hits_addend 0: nothing taken),
	// the stream-done call charges its usage; neither is UNAVAILABLE.
	if resp := settleCall(t, c, "u1", "M1", 0); resp.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("request path at maxmemory: %v", resp)
	}
	if got := settleLeft(t, c, "u1"); got != 9999 {
		t.Fatalf("%d left after the request path at maxmemory, want 9999 (nothing booked)", got)
	}
	if resp := settleCall(t, c, "u1", "M1", 700); resp.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("stream-done at maxmemory: %v", resp)
	}
	if got := settleLeft(t, c, "u1"); got != 9299 {
		t.Fatalf("%d left after the stream-done call at maxmemory, want 9299", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !p.logged("envoy_settle: booking not kept") {
		if time.Now().After(deadline) {
			t.Fatal("no log record of the calls decided without their booking")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
