// envoy_settle over real gRPC with Envoy's generated types: parallel
// request-path calls book their estimates, stream-done calls settle them.

package envoyrls_test

import (
	"context"
	"net"
	"sort"
	"strconv"
	"sync"
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
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/memstore"
)

// settlePolicy: a budget of 5,000 tokens (no refill within a test: the
// clock is frozen), each request path booking 1,000; a request limit on
// the same descriptors without envoy_settle (calls, whose capacity is
// large enough never to be the tightest).
const settlePolicy = `
limits:
  - name: tokens
    key: "user:{user}"
    capacity: 5000
    refill: "5000/h"
    envoy_settle: {by: request_id, estimate: 1000}
  - name: calls
    key: "user:{user}"
    capacity: 1000000
    refill: "1000000/h"
`

// settleClient serves src in policy mode with bk as the settle book (nil:
// none) and returns a real gRPC client, and the limiter.
func settleClient(t *testing.T, src string, bk book.Book) (rls.RateLimitServiceClient, *limiter.Limiter) {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen: exact figures
	l, err := limiter.New(p, memstore.New(memstore.WithClock(clock)))
	if err != nil {
		t.Fatal(err)
	}
	svc := envoyrls.NewPolicyService(l)
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
	return rls.NewRateLimitServiceClient(conn), l
}

// aiCall is one call as Envoy AI Gateway makes it: the user and the
// request's id (from x-request-id) as entries, hits the descriptor's
// hits_addend (the request path's cost, 0 as Envoy Gateway's default
// request cost; the stream-done call's, the tokens used).
func aiCall(c rls.RateLimitServiceClient, user, id string, hits uint64) (*rls.RateLimitResponse, error) {
	d := desc("user", user, "request_id", id)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
}

// remainingOf is what the tokens limit reports left to a peek (a call
// without the id entry, hits 0).
func remainingOf(t *testing.T, c rls.RateLimitServiceClient, user string) uint32 {
	t.Helper()
	d := desc("user", user)
	d.HitsAddend = wrapperspb.UInt64(0)
	r, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	// The tightest limit is shown (calls never is).
	if n := r.Statuses[0].GetCurrentLimit().GetName(); n != "tokens" {
		t.Fatalf("peek shows %q, want tokens: %v", n, r)
	}
	return r.Statuses[0].LimitRemaining
}

// parallelRequestPath makes n request-path calls at once, ids prefix-0..n-1,
// and returns the admitted ids in order.
func parallelRequestPath(t *testing.T, c rls.RateLimitServiceClient, user, prefix string, n int) []string {
	t.Helper()
	var mu sync.Mutex
	var admitted []string
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			<-start
			r, err := aiCall(c, user, id, 0)
			if err != nil {
				t.Error(err)
				return
			}
			if r.OverallCode == ok {
				mu.Lock()
				admitted = append(admitted, id)
				mu.Unlock()
			}
		}(prefix + strconv.Itoa(i))
	}
	close(start)
	wg.Wait()
	sort.Strings(admitted)
	return admitted
}

func TestEnvoySettleParallel(t *testing.T) {
	c, l := settleClient(t, settlePolicy, book.NewMemory(book.Config{}, nil))
	// 20 parallel request paths against a budget of 5 estimates: 5 booked.
	admitted := parallelRequestPath(t, c, "u1", "req-", 20)
	if len(admitted) != 5 {
		t.Fatalf("%d admitted on the request path, want 5: %q", len(admitted), admitted)
	}
	if got := remainingOf(t, c, "u1"); got != 0 {
		t.Fatalf("after 5 bookings %d left, want 0", got)
	}
	// Their stream-done calls settle to the real usage (each answered
	// OK); one uses more than it booked (1,500: charged into debt).
	usage := []uint64{300, 400, 200, 100, 1500}
	for i, id := range admitted {
		r, err := aiCall(c, "u1", id, usage[i])
		if err != nil || r.OverallCode != ok {
			t.Fatalf("stream-done %s: %v %v", id, r, err)
		}
	}
	// 5,000 - 2,500 used.
	if got := remainingOf(t, c, "u1"); got != 2500 {
		t.Fatalf("after settling %d left, want 2500", got)
	}
	// The refused calls' stream-done calls (no booking: charged as any
	// call, here 0 tokens) change nothing, and a second stream-done for a
	// settled id is charged as any call too (its hits_addend).
	for i := 0; i < 20; i++ {
		id := "req-" + strconv.Itoa(i)
		if !contains(admitted, id) {
			if _, err := aiCall(c, "u1", id, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := remainingOf(t, c, "u1"); got != 2500 {
		t.Fatalf("after the refused calls' stream-done %d left, want 2500", got)
	}
	if r, err := aiCall(c, "u1", admitted[0], 100); err != nil || r.OverallCode != ok {
		t.Fatalf("second stream-done: %v %v", r, err)
	}
	if got := remainingOf(t, c, "u1"); got != 2400 {
		t.Fatalf("after a second stream-done of 100: %d left, want 2400", got)
	}
	// The next request paths see the settled remainder: 2 more bookings
	// of 1,000 in 2,400, then refused.
	next := parallelRequestPath(t, c, "u1", "next-", 6)
	if len(next) != 2 {
		t.Fatalf("%d admitted after settling, want 2: %q", len(next), next)
	}
	if got := remainingOf(t, c, "u1"); got != 400 {
		t.Fatalf("after 2 more bookings %d left, want 400", got)
	}
	// A request path whose hits_addend is above the estimate books it
	// (another user: 1,200 would not fit in u1's 400).
	if r, err := aiCall(c, "u2", "big", 1200); err != nil || r.OverallCode != ok {
		t.Fatalf("big: %v %v", r, err)
	}
	if got := remainingOf(t, c, "u2"); got != 3800 {
		t.Fatalf("a request path of 1,200: %d left, want 3800", got)
	}
	if r, err := aiCall(c, "u2", "big", 200); err != nil || r.OverallCode != ok {
		t.Fatalf("big settled: %v %v", r, err)
	}
	if got := remainingOf(t, c, "u2"); got != 4800 {
		t.Fatalf("big settled to 200: %d left, want 4800", got)
	}
	// The calls limit, which has no envoy_settle, kept what the request
	// paths took (their hits_addend: 0, and 1,200 for u2) and took nothing
	// at settle; the second stream-done of u1, a call without a booking,
	// took its 100.
	if got := callsLeft(t, l, "u1"); got != 1_000_000-100 {
		t.Fatalf("calls of u1: %d left", got)
	}
	if got := callsLeft(t, l, "u2"); got != 1_000_000-1200 {
		t.Fatalf("calls of u2: %d left", got)
	}
}

// callsLeft is what the calls limit holds for user.
func callsLeft(t *testing.T, l *limiter.Limiter, user string) int64 {
	t.Helper()
	res, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"domain": "ai", "user": user}, Peek: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range res.Limits {
		if st.Name == "calls" {
			return st.TokensRemaining
		}
	}
	t.Fatal("no calls limit")
	return 0
}

// A stream-done call with no booking (an id never seen by the request
// path: here a different id) charges as today; without a book every call
// is charged as any, and the id entry is still no part of a key.
func TestEnvoySettleNoBooking(t *testing.T) {
	for _, withBook := range []bool{true, false} {
		var bk book.Book
		if withBook {
			bk = book.NewMemory(book.Config{}, nil)
		}
		c, _ := settleClient(t, settlePolicy, bk)
		if _, err := aiCall(c, "u1", "a", 700); err != nil { // (with a book: a request path booking 1,000)
			t.Fatal(err)
		}
		want := uint32(4000)
		if !withBook {
			want = 4300 // charged its hits_addend
		}
		if got := remainingOf(t, c, "u1"); got != want {
			t.Fatalf("book %v: %d left, want %d", withBook, got, want)
		}
		// Two different ids in one call are refused.
		d1, d2 := desc("user", "u1", "request_id", "x"), desc("user", "u1", "request_id", "y")
		_, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d1, d2}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("two ids: %v", err)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// A request path that can never be admitted (a hits_addend above a
// limit's capacity: OVER_LIMIT, nothing taken) is a refused request path:
// its stream-done call is charged its hits_addend as any call, not taken
// for a first call that books the estimate.
func TestEnvoySettleCostAboveCapacity(t *testing.T) {
	c, _ := settleClient(t, settlePolicy, book.NewMemory(book.Config{}, nil))
	r, err := aiCall(c, "u1", "big", 2_000_000) // above calls' capacity
	if err != nil || r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("request path: %v %v", r, err)
	}
	if got := remainingOf(t, c, "u1"); got != 5000 {
		t.Fatalf("after the refused request path: %d left, want 5000", got)
	}
	if _, err := aiCall(c, "u1", "big", 300); err != nil {
		t.Fatal(err)
	}
	if got := remainingOf(t, c, "u1"); got != 4700 {
		t.Fatalf("after its stream-done call: %d left, want 4700 (charged its 300)", got)
	}
}
