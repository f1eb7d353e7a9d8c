// A descriptor's own limit (Envoy's per-request override) in policy mode,
// over real gRPC.

package envoyrls_test

import (
	"net"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

// In policy mode a descriptor's limit replaces the parameters of the
// policy limit that applies to it (login: 1 per 2 s), as in the Envoy
// configuration mode: 3 per SECOND admits three and states itself as the
// current limit; the same descriptor without it is the policy's again;
// 0 per unit refuses, and the call takes nothing from its other
// descriptors.
func TestPolicyServiceDescriptorLimit(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: login
    key: "path:{path}"
    capacity: 1
    refill_per_second: 0.5
  - name: per_ip
    key: "ip:{remote_address}"
    capacity: 5
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
	for i, want := range []rls.RateLimitResponse_Code{ok, ok, ok, over} {
		r := ask(t, c, "edge", 0, withLimit(desc("path", "/a"), 3, typev3.RateLimitUnit_SECOND))
		cl := r.Statuses[0].CurrentLimit
		if r.Statuses[0].Code != want || cl.GetName() != "login" || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rls.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("call %d: the descriptor's limit (3/s) decides: %v", i, r)
		}
	}
	r := ask(t, c, "edge", 0, desc("path", "/b"))
	if r.Statuses[0].Code != ok || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 30 {
		t.Fatalf("without it, the policy's limit (0.5/s: 30 per MINUTE): %v", r)
	}
	if r := ask(t, c, "edge", 0, desc("path", "/b")); r.Statuses[0].Code != over {
		t.Fatalf("the policy's capacity 1: %v", r)
	}
	ip := desc("remote_address", "10.0.0.9")
	r = ask(t, c, "edge", 0, ip, withLimit(desc("path", "/c"), 0, typev3.RateLimitUnit_MINUTE))
	if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over {
		t.Fatalf("0 per unit refuses its descriptor: %v", r)
	}
	if r := ask(t, c, "edge", 0, ip); r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("a refused call takes nothing (5 - 1 left): %v", r)
	}
	if r := ask(t, c, "edge", 2, withLimit(desc("path", "/e"), 3, typev3.RateLimitUnit_SECOND)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits within the descriptor's limit (3), above the policy's capacity (1): %v", r)
	}
	if r := ask(t, c, "edge", 5, withLimit(desc("path", "/d"), 3, typev3.RateLimitUnit_SECOND)); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("hits above the descriptor's limit: over, stating it: %v", r)
	}
}
