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

// BenchmarkShouldRateLimit is the service's own work per call (no gRPC):
// one descriptor of one entry, over 1,000 keys; Reference with the
// reference's metric names counted too (sluice ratelimit).
func BenchmarkShouldRateLimit(b *testing.B) {
	b.Run("Plain", func(b *testing.B) { benchShouldRateLimit(b, false) })
	b.Run("Reference", func(b *testing.B) { benchShouldRateLimit(b, true) })
}

func benchShouldRateLimit(b *testing.B, ref bool) {
	_, root, err := envoyrls.Parse([]byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	svc := envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{"edge": root}}, memstore.New())
	if ref {
		if err := svc.RegisterReference(prometheus.NewRegistry()); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]*rls.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: strconv.Itoa(i)}}}}}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r, err := svc.ShouldRateLimit(context.Background(), reqs[i])
		if err != nil || r.OverallCode != rls.RateLimitResponse_OK {
			b.Fatal(r, err)
		}
		if i++; i == len(reqs) {
			i = 0
		}
	}
}
