// A descriptor's own limit (Envoy's per-request override) over real gRPC.

package envoyrls_test

import (
	"context"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

// counted is client with the decisions counted in the registry returned.
func counted(t *testing.T) (rls.RateLimitServiceClient, *prometheus.Registry) {
	t.Helper()
	cfg, err := envoyrls.LoadDir("testdata/config")
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen: exact figures
	svc := envoyrls.NewService(cfg, memstore.New(memstore.WithClock(clock)))
	reg := prometheus.NewRegistry()
	if err := svc.Register(reg); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(gs, svc)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rls.NewRateLimitServiceClient(conn), reg
}

// withLimit is d with its own limit (Envoy's per-request override).
func withLimit(d *ratelimitv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// A descriptor's own limit replaces the configured one, as the reference
// service does: requests_per_unit per unit, unnamed, whatever the tree
// says of the descriptor (a configured limit, none, unlimited or
// shadow_mode), in a known domain only; its metrics name is the domain
// and the entries' keys.
func TestDescriptorLimitOverrides(t *testing.T) {
	c, reg := counted(t)
	type call struct {
		d    *ratelimitv3.RateLimitDescriptor
		want []rls.RateLimitResponse_Code
	}
	for name, tc := range map[string]call{
		"raises a configured limit (login: 1/s)":  {withLimit(desc("path", "/login"), 3, typev3.RateLimitUnit_SECOND), []rls.RateLimitResponse_Code{ok, ok, ok, over}},
		"limits a descriptor the tree does not":   {withLimit(desc("nothing", "here"), 2, typev3.RateLimitUnit_MINUTE), []rls.RateLimitResponse_Code{ok, ok, over}},
		"enforces over unlimited":                 {withLimit(desc("client", "internal"), 1, typev3.RateLimitUnit_HOUR), []rls.RateLimitResponse_Code{ok, over}},
		"enforces over shadow_mode":               {withLimit(desc("client", "canary"), 1, typev3.RateLimitUnit_DAY), []rls.RateLimitResponse_Code{ok, over}},
		"0 requests per unit refuses every call":  {withLimit(desc("path", "/zero"), 0, typev3.RateLimitUnit_SECOND), []rls.RateLimitResponse_Code{over, over}},
		"deeper than the tree (tenant, plan, id)": {withLimit(desc("tenant", "a", "plan", "free", "id", "7"), 1, typev3.RateLimitUnit_YEAR), []rls.RateLimitResponse_Code{ok, over}},
	} {
		for i, want := range tc.want {
			r := ask(t, c, "edge", 0, tc.d)
			st := r.Statuses[0]
			if st.Code != want || r.OverallCode != want {
				t.Fatalf("%s: call %d: %v, want %v", name, i, r, want)
			}
			cl := st.CurrentLimit
			if cl == nil || cl.RequestsPerUnit != tc.d.Limit.RequestsPerUnit || cl.Unit != rls.RateLimitResponse_RateLimit_Unit(tc.d.Limit.Unit) || cl.Name != "" {
				t.Fatalf("%s: current limit %v, want the descriptor's", name, cl)
			}
		}
	}
	// The wait of a refusal is the descriptor limit's: 2 per minute
	// refills one in 30 s.
	r := ask(t, c, "edge", 0, withLimit(desc("nothing", "here"), 2, typev3.RateLimitUnit_MINUTE))
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 30*time.Second {
		t.Fatalf("retry %v, want 30s", got)
	}
	// unit_multiplier (which the reference service ignores) lengthens the
	// period: 2 per 10 s refills one in 5 s.
	m := withLimit(desc("path", "/mult"), 2, typev3.RateLimitUnit_SECOND)
	m.Limit.UnitMultiplier = wrapperspb.UInt32(10)
	ask(t, c, "edge", 2, m)
	if r := ask(t, c, "edge", 1, m); r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != 5*time.Second {
		t.Fatalf("unit_multiplier 10: %v", r)
	}
	// In an unknown domain nothing is limited, a descriptor limit neither.
	if r := ask(t, c, "nowhere", 0, withLimit(desc("path", "/login"), 0, typev3.RateLimitUnit_SECOND)); r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain: %v", r)
	}
	// An unknown unit is refused, as the reference service fails the call.
	_, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{withLimit(desc("path", "/x"), 5, typev3.RateLimitUnit_UNKNOWN)}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unit UNKNOWN: %v", err)
	}
	if got := counterOf(t, reg, "edge.path", "admitted"); got != 4 { // login 3, /mult 1
		t.Fatalf("edge.path admitted: %v", got)
	}
	if got := counterOf(t, reg, "edge.tenant.plan.id", "rejected"); got != 1 {
		t.Fatalf("edge.tenant.plan.id rejected: %v", got)
	}
}
