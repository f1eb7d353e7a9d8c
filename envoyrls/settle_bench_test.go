// What envoy_settle costs a call: a request path and its stream-done
// call, with the bookings in a memory book.

package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/memstore"
)

// BenchmarkShouldRateLimitSettle is the service's own work (no gRPC) for
// one request of an envoy_settle rate_limit: its request-path call
// (booked) and its stream-done call (settled), over 1,000 keys, each
// request a new id.
func BenchmarkShouldRateLimitSettle(b *testing.B) {
	_, root, err := envoyrls.Parse([]byte("domain: ai\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000, envoy_settle: {by: request_id, estimate: 1000}}\n"))
	if err != nil {
		b.Fatal(err)
	}
	svc := envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{"ai": root}}, memstore.New())
	svc.SetSettleBook(book.NewMemory(book.Config{}, nil))
	call := func(user, id string, hits uint64) *rls.RateLimitRequest {
		return &rls.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}, {Key: "request_id", Value: id}},
			HitsAddend: wrapperspb.UInt64(hits)}}}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		user, id := strconv.Itoa(i%1000), strconv.Itoa(i)
		for _, req := range []*rls.RateLimitRequest{call(user, id, 0), call(user, id, 300)} {
			if r, err := svc.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rls.RateLimitResponse_OK {
				b.Fatal(r, err)
			}
		}
		i++
	}
}
