// Decisions counted per configured node (across a reload, with overrides
// and several descriptors), and the one-descriptor call's allocations.

package envoyrls_test

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

const countedYAML = `domain: edge
descriptors:
  - key: client
    value: a
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: client
    rate_limit: {name: clients, unit: hour, requests_per_unit: 3}
`

func TestDecisionsCountedPerNode(t *testing.T) {
	parse := func() *envoyrls.Config {
		_, root, err := envoyrls.Parse([]byte(countedYAML))
		if err != nil {
			t.Fatal(err)
		}
		return &envoyrls.Config{Domains: map[string]*envoyrls.Node{"edge": root}}
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	svc := envoyrls.NewService(parse(), memstore.New(memstore.WithClock(clock)))
	reg := prometheus.NewRegistry()
	if err := svc.Register(reg); err != nil {
		t.Fatal(err)
	}
	call := func(ds ...*ratelimitv3.RateLimitDescriptor) rls.RateLimitResponse_Code {
		t.Helper()
		r, err := svc.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "edge", Descriptors: ds})
		if err != nil || len(r.Statuses) != len(ds) {
			t.Fatalf("%v %v", r, err)
		}
		return r.OverallCode
	}
	for range 3 { // client_a: 2 an hour
		call(desc("client", "a"))
	}
	svc.SetConfig(parse()) // a reload: new nodes, the same series
	for range 2 {
		call(desc("client", "a"))
	}
	// Two descriptors in one call; then one with its own limit.
	if got := call(desc("client", "b"), desc("client", "c")); got != rls.RateLimitResponse_OK {
		t.Fatalf("b and c: %v", got)
	}
	own := desc("client", "d")
	own.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	call(own)
	if got := call(own); got != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("own limit of 1: %v", got)
	}
	for _, c := range []struct {
		limit, result string
		want          float64
	}{
		{"client_a", "admitted", 2}, {"client_a", "rejected", 3},
		{"clients", "admitted", 2},
		{"edge.client", "admitted", 1}, {"edge.client", "rejected", 1},
	} {
		if got := counterOf(t, reg, c.limit, c.result); got != c.want {
			t.Errorf("sluice_decisions_total{limit=%q, result=%q} = %v, want %v", c.limit, c.result, got, c.want)
		}
	}
}
