// Fair shares in policy mode, over real gRPC: the fair_share's by
// descriptor entry names the tenant, each tenant held to its share of a
// contended bucket.

package envoyrls_test

import (
	"net"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

func TestPolicyServiceFairShare(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: provider_tpm
    key: "provider:{provider}"
    capacity: 10
    refill_per_second: 10
    fair_share: {by: tenant, weights: {acme: 3}, active_window: 10s}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen
	l, err := limiter.New(p, memstore.New(memstore.WithClock(clock)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(gs, envoyrls.NewPolicyService(l))
	go gs.Serve(ln)
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rls.NewRateLimitServiceClient(conn)
	// zed 1 and acme 5 uncontended (4 left); then zed (weight 1 of 4) gets
	// one more token and no second, while acme (3 of 4) takes the 3 left.
	for i, s := range []struct {
		tenant string
		hits   uint32
		want   rls.RateLimitResponse_Code
	}{{"zed", 1, ok}, {"acme", 5, ok}, {"zed", 1, ok}, {"zed", 1, over}, {"acme", 1, ok}, {"acme", 1, ok}, {"acme", 1, ok}, {"acme", 1, over}} {
		r := ask(t, c, "edge", s.hits, desc("provider", "openai", "tenant", s.tenant))
		if r.OverallCode != s.want {
			t.Fatalf("call %d (%s %d): %v", i, s.tenant, s.hits, r)
		}
		if i == 3 {
			if st := r.Statuses[0]; st.LimitRemaining != 3 || st.DurationUntilReset == nil {
				t.Errorf("the share's refusal shows the bucket's state (3 left): %v", st)
			}
		}
	}
	// The tenant entry is no part of the key: one bucket for the provider.
	if r := ask(t, c, "edge", 1, desc("provider", "openai")); r.OverallCode != over {
		t.Fatalf("no tenant: the provider's bucket is empty: %v", r)
	}
}
