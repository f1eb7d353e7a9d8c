// envoy_settle in Envoy-config mode over real gRPC: a rate_limit's
// envoy_settle books by request id on the request path and settles on the
// stream-done call.

package envoyrls_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/memstore"
)

// settleEnvoyConfig: 5,000 tokens an hour per user (frozen clock: no
// refill), each request path booking 1,000.
const settleEnvoyConfig = `domain: ai
descriptors:
  - key: user
    rate_limit:
      name: tokens
      unit: hour
      requests_per_unit: 5000
      envoy_settle: {by: request_id, estimate: 1000}
`

func envoySettleClient(t *testing.T, src string, bk book.Book) rls.RateLimitServiceClient {
	t.Helper()
	domain, root, err := envoyrls.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen: exact figures
	svc := envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{domain: root}}, memstore.New(memstore.WithClock(clock)))
	svc.SetSettleBook(bk)
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
	return rls.NewRateLimitServiceClient(conn)
}

// envoyLeft is what the user's bucket holds, to a peek (no id entry, hits 0).
func envoyLeft(t *testing.T, c rls.RateLimitServiceClient, user string) uint32 {
	t.Helper()
	d := desc("user", user)
	d.HitsAddend = wrapperspb.UInt64(0)
	r, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Statuses[0].LimitRemaining
}

func TestEnvoyConfigSettleParallel(t *testing.T) {
	c := envoySettleClient(t, settleEnvoyConfig, book.NewMemory(book.Config{}, nil))
	admitted := parallelRequestPath(t, c, "u1", "req-", 20)
	if len(admitted) != 5 {
		t.Fatalf("%d admitted on the request path, want 5: %q", len(admitted), admitted)
	}
	if got := envoyLeft(t, c, "u1"); got != 0 {
		t.Fatalf("after 5 bookings %d left, want 0", got)
	}
	usage := []uint64{300, 400, 200, 100, 1500} // (the last beyond its booking: charged into debt)
	for i, id := range admitted {
		if r, err := aiCall(c, "u1", id, usage[i]); err != nil || r.OverallCode != ok {
			t.Fatalf("stream-done %s: %v %v", id, r, err)
		}
	}
	if got := envoyLeft(t, c, "u1"); got != 2500 {
		t.Fatalf("after settling %d left, want 2500", got)
	}
	// The refused request paths' stream-done calls: no booking, 0 hits.
	for i := 0; i < 20; i++ {
		if id := "req-" + itoa(i); !contains(admitted, id) {
			if _, err := aiCall(c, "u1", id, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := envoyLeft(t, c, "u1"); got != 2500 {
		t.Fatalf("after the refused calls' stream-done %d left, want 2500", got)
	}
	// The next request paths book in the settled remainder: 2 of 6.
	if next := parallelRequestPath(t, c, "u1", "next-", 6); len(next) != 2 {
		t.Fatalf("%d admitted after settling, want 2: %q", len(next), next)
	}
	if got := envoyLeft(t, c, "u1"); got != 500 {
		t.Fatalf("after 2 more bookings %d left, want 500", got)
	}
	// A stream-done call with usage above the bucket's capacity settles
	// too (the whole excess charged: the bucket at most one capacity in
	// debt).
	if r, err := aiCall(c, "u2", "huge", 0); err != nil || r.OverallCode != ok {
		t.Fatalf("huge: %v %v", r, err)
	}
	if r, err := aiCall(c, "u2", "huge", 7000); err != nil || r.OverallCode != ok {
		t.Fatalf("huge settled: %v %v", r, err)
	}
	if r, err := aiCall(c, "u2", "after", 0); err != nil || r.OverallCode != over {
		t.Fatalf("after a settle beyond the capacity: %v %v", r, err)
	}
}

// Without a book the id entry is still never matched: a call is charged
// its hits_addend on the user's bucket.
func TestEnvoyConfigSettleNoBook(t *testing.T) {
	c := envoySettleClient(t, settleEnvoyConfig, nil)
	if r, err := aiCall(c, "u1", "a", 700); err != nil || r.OverallCode != ok || r.Statuses[0].GetCurrentLimit().GetName() != "tokens" {
		t.Fatalf("%v %v", r, err)
	}
	if got := envoyLeft(t, c, "u1"); got != 4300 {
		t.Fatalf("%d left, want 4300", got)
	}
	d1, d2 := desc("user", "u1", "request_id", "x"), desc("user", "u1", "request_id", "y")
	_, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d1, d2}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("two ids: %v", err)
	}
}

func TestEnvoyConfigSettleErrors(t *testing.T) {
	head := "domain: ai\ndescriptors:\n  - key: user\n"
	for _, tc := range []struct{ src, want string }{
		{head + "    rate_limit: {unit: hour, requests_per_unit: 100, envoy_settle: {by: request_id, estimate: 101}}\n", "above requests_per_unit 100"},
		{head + "    rate_limit: {unit: hour, requests_per_unit: 100, envoy_settle: {by: request_id}}\n", "needs estimate"},
		{head + "    rate_limit: {unit: hour, requests_per_unit: 100, envoy_settle: {estimate: 1}}\n", "needs by"},
		{head + "    rate_limit: {unit: hour, requests_per_unit: 100, envoy_settle: {by: request_id, estimate: 0}}\n", "at least 1"},
		{head + "    rate_limit: {unit: hour, requests_per_unit: 100, envoy_settle: {by: request_id, estimate: 1, x: 2}}\n", "unknown field \"x\" in envoy_settle"},
		{head + "    rate_limit: {unit: hour, requests_per_unit: 100, envoy_settle: {by: user, estimate: 1}}\n", "also a descriptor key"},
		{head + "    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 100, envoy_settle: {by: request_id, estimate: 1}}\n", "takes no envoy_settle"},
		{head + "    rate_limit: {unlimited: true, envoy_settle: {by: request_id, estimate: 1}}\n", "unlimited rate_limit takes no envoy_settle"},
	} {
		_, _, err := envoyrls.Parse([]byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.src, err, tc.want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
