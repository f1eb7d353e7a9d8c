// envoy_settle through sluice serve's gRPC policy mode: on memory, and
// with two instances sharing a real redis-server, the stream-done call
// reaching the other instance than its request path.

package main

import (
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// settleServePolicy: 5,000 tokens a month (nothing refills during the
// test), each request path booking 1,000.
const settleServePolicy = `limits:
  - name: tokens
    key: "user:{user}"
    algorithm: quota
    period: month
    limit: 5000
    envoy_settle: {by: request_id, estimate: 1000}
`

// settleCall is a call as Envoy AI Gateway makes it (user, and the
// request's id from x-request-id; hits the descriptor's hits_addend).
func settleCall(t *testing.T, c rls.RateLimitServiceClient, user, id string, hits uint64) *rls.RateLimitResponse {
	t.Helper()
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}, HitsAddend: wrapperspb.UInt64(hits)}
	if id != "" {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "request_id", Value: id})
	}
	r, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestServeEnvoySettle(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "memory"
		if shared {
			name = "redis, two instances"
		}
		t.Run(name, func(t *testing.T) {
			pol := filepath.Join(t.TempDir(), "p.yaml")
			writePolicy(t, pol, settleServePolicy)
			args := []string{"--config", pol, "--grpc", "127.0.0.1:0"}
			n := 1
			if shared {
				// (--refusal-cache 0: an instance's refusal cache would keep
				// refusing the key after the other instance's settle returned
				// budget, until the cached refusal's retry_after, by its rule:
				// docs/behaviour.md "Reserve-then-settle through Envoy".)
				args = append(args, "--store", "redis://"+redistest.New(t).Addr, "--refusal-cache", "0")
				n = 2
			}
			var cs []rls.RateLimitServiceClient
			for range n {
				_, c := dialRLS(t, serve(t, args...))
				cs = append(cs, c)
			}
			// 20 parallel request paths (spread over the instances)
			// against 5 estimates: 5 booked.
			var mu sync.Mutex
			var admitted []int
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					if r := settleCall(t, cs[i%n], "u1", "req-"+strconv.Itoa(i), 0); r.OverallCode == rls.RateLimitResponse_OK {
						mu.Lock()
						admitted = append(admitted, i)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			sort.Ints(admitted)
			if len(admitted) != 5 {
				t.Fatalf("%d admitted on the request path, want 5: %v", len(admitted), admitted)
			}
			// Their stream-done calls, each on the other instance than its
			// request path's when there are two, settle to the usage.
			usage := []uint64{300, 400, 200, 100, 1500} // (the last one beyond its booking: charged)
			var used uint32
			for k, i := range admitted {
				if r := settleCall(t, cs[(i+1)%n], "u1", "req-"+strconv.Itoa(i), usage[k]); r.OverallCode != rls.RateLimitResponse_OK {
					t.Fatalf("stream-done of req-%d: %v", i, r)
				}
				used += uint32(usage[k])
			}
			// The refused request paths' stream-done calls (no booking,
			// hits_addend 0) take nothing.
			for i := range 20 {
				settleCall(t, cs[i%n], "u1", "req-"+strconv.Itoa(i), 0)
			}
			// The next requests see the settled remainder on every instance.
			for k, c := range cs {
				if r := settleCall(t, c, "u1", "", 0); r.Statuses[0].LimitRemaining != 5000-used {
					t.Fatalf("instance %d: %d left after settling, want %d: %v", k, r.Statuses[0].LimitRemaining, 5000-used, r)
				}
			}
			for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
				if r := settleCall(t, cs[i%n], "u1", "next-"+strconv.Itoa(i), 0); r.OverallCode != want {
					t.Fatalf("next request path %d: %v, want %v", i, r, want)
				}
			}
		})
	}
}

// settleRuntime is an Envoy ratelimit configuration with envoy_settle:
// 5,000 tokens a year per user (nothing measurable refills during the
// test), each request path booking 1,000.
const settleRuntime = `domain: ai
descriptors:
  - key: user
    rate_limit:
      name: tokens
      unit: year
      requests_per_unit: 5000
      envoy_settle: {by: request_id, estimate: 1000}
`

// envoy_settle through two `sluice ratelimit` drop-ins sharing one real
// redis-server, and a 3-node Redis Cluster: the stream-done call of each
// request reaches the other instance than its request path (a booking is
// in Redis).
func TestRatelimitEnvoySettleTwoInstances(t *testing.T) {
	t.Run("Redis", func(t *testing.T) {
		r := redistest.New(t)
		testRatelimitEnvoySettle(t, func(env map[string]string) {}, r.Addr)
	})
	t.Run("RedisCluster", func(t *testing.T) {
		cl := redistest.NewCluster(t, 3)
		testRatelimitEnvoySettle(t, func(env map[string]string) { env["REDIS_TYPE"] = "cluster" }, strings.Join(cl.Addrs(), ","))
	})
}

func testRatelimitEnvoySettle(t *testing.T, set func(map[string]string), redisURL string) {
	var cs []rls.RateLimitServiceClient
	for range 2 {
		root := filepath.Join(t.TempDir(), "runtime", "current")
		writeRuntime(t, root, map[string]string{"ratelimit/config/ai.yaml": settleRuntime})
		env := rlEnv(t, root, redisURL)
		set(env)
		cs = append(cs, rlClient(t, startRatelimit(t, env)))
	}
	var mu sync.Mutex
	var admitted []int
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if r := settleCall(t, cs[i%2], "u1", "req-"+strconv.Itoa(i), 0); r.OverallCode == rls.RateLimitResponse_OK {
				mu.Lock()
				admitted = append(admitted, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Ints(admitted)
	if len(admitted) != 5 {
		t.Fatalf("%d admitted on the request path, want 5: %v", len(admitted), admitted)
	}
	usage := []uint64{300, 400, 200, 100, 1500}
	for k, i := range admitted {
		if r := settleCall(t, cs[(i+1)%2], "u1", "req-"+strconv.Itoa(i), usage[k]); r.OverallCode != rls.RateLimitResponse_OK {
			t.Fatalf("stream-done of req-%d: %v", i, r)
		}
	}
	for i := range 20 {
		settleCall(t, cs[(i+1)%2], "u1", "req-"+strconv.Itoa(i), 0) // (settled or refused: nothing more taken)
	}
	for k, c := range cs {
		if r := settleCall(t, c, "u1", "", 0); r.Statuses[0].LimitRemaining != 2500 {
			t.Fatalf("instance %d: %d left after settling, want 2500: %v", k, r.Statuses[0].LimitRemaining, r)
		}
	}
	for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
		if r := settleCall(t, cs[i%2], "u1", "next-"+strconv.Itoa(i), 0); r.OverallCode != want {
			t.Fatalf("next request path %d: %v, want %v", i, r, want)
		}
	}
}
