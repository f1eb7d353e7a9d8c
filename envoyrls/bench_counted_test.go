// BenchmarkShouldRateLimitCounted: the service's work per call with its
// decisions counted (sluice_decisions_total), as sluice serve runs it.

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

// BenchmarkShouldRateLimitCounted is one descriptor of one entry over 1,000
// keys (One), and two descriptors of one entry each (Two), counted.
func BenchmarkShouldRateLimitCounted(b *testing.B) {
	b.Run("One", func(b *testing.B) { benchCounted(b, 1) })
	b.Run("Two", func(b *testing.B) { benchCounted(b, 2) })
}

func benchCounted(b *testing.B, n int) {
	_, root, err := envoyrls.Parse([]byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	svc := envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{"edge": root}}, memstore.New())
	if err := svc.Register(prometheus.NewRegistry()); err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rls.RateLimitRequest, 1000)
	for i := range reqs {
		ds := []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: strconv.Itoa(i)}}}}
		if n == 2 {
			ds = append(ds, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: strconv.Itoa(i % 10)}}})
		}
		reqs[i] = &rls.RateLimitRequest{Domain: "edge", Descriptors: ds}
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
