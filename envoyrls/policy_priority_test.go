// Priority classes in policy mode, over real gRPC: the descriptor entry
// "priority" names the class and is no part of a key.

package envoyrls_test

import (
	"context"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

func TestPolicyServicePriority(t *testing.T) {
	p, err := policy.Parse([]byte(`
priorities:
  - name: interactive
  - name: batch
    reserve: 0.5
    max_queue_ms: 0
limits:
  - name: api
    key: "user:{user}"
    capacity: 4
    refill_per_second: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen
	l, err := limiter.New(p, memstore.New(memstore.WithClock(clock)))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gs := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(gs, envoyrls.NewPolicyService(l))
	go gs.Serve(ln)
	defer gs.Stop()
	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	c := rls.NewRateLimitServiceClient(conn)
	// batch: 2 of the 4 (its reserve is half), then refused; the same key
	// (the entry is no part of it) still admits interactive's 2.
	for i, want := range []rls.RateLimitResponse_Code{ok, ok, over} {
		if r := ask(t, c, "edge", 0, desc("user", "u1", "priority", "batch")); r.OverallCode != want {
			t.Fatalf("batch call %d: %v", i, r)
		}
	}
	for i, want := range []rls.RateLimitResponse_Code{ok, ok, over} {
		if r := ask(t, c, "edge", 0, desc("user", "u1", "priority", "interactive")); r.OverallCode != want {
			t.Fatalf("interactive call %d: %v", i, r)
		}
	}
	if r := ask(t, c, "edge", 0, desc("user", "u1")); r.OverallCode != over {
		t.Fatalf("no class: the same key, empty: %v", r)
	}
	for _, ds := range [][]string{{"user", "u2", "priority", "bulk"}} {
		_, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(ds...)}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want INVALID_ARGUMENT", ds, err)
		}
	}
	_, err = c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u3", "priority", "batch"), desc("user", "u4", "priority", "interactive")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("two classes in one call: %v, want INVALID_ARGUMENT", err)
	}
}
