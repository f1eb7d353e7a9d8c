//go:build !race

// The one-descriptor call's allocations (not under -race, which adds its
// own).

package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestOneDescriptorAllocs: a counted one-descriptor call allocates its
// state and answer at once, its store key and its RateLimit fields: at
// most 4 allocations (14 when each part had its own).
func TestOneDescriptorAllocs(t *testing.T) {
	_, root, err := envoyrls.Parse([]byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc := envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{"edge": root}}, memstore.New())
	if err := svc.Register(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	reqs := make([]*rls.RateLimitRequest, 100)
	for i := range reqs {
		reqs[i] = &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: strconv.Itoa(i)}}}}}
	}
	ctx := context.Background()
	for _, r := range reqs { // each key's bucket made
		if _, err := svc.ShouldRateLimit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		i++
	}); n > 4 {
		t.Fatalf("%v allocations per call, want at most 4", n)
	}
}
