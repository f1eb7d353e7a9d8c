// Tests of the xDS client against go-control-plane's own SotW server and snapshot cache.

package xds_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/envoyrls/xds"
	"github.com/sluicehq/sluice/store/memstore"
)

// controlPlane is go-control-plane's SotW server over a snapshot cache on
// a loopback port, recording every request it receives.
type controlPlane struct {
	t     *testing.T
	cache cachev3.SnapshotCache
	addr  string
	gs    *grpc.Server

	mu      sync.Mutex
	reqs    []*discoveryv3.DiscoveryRequest
	headers []metadata.MD // of each stream opened
	got     chan struct{} // a request arrived
}

// startControlPlane listens on addr ("127.0.0.1:0" for a free port).
func startControlPlane(t *testing.T, addr string) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), got: make(chan struct{}, 1)}
	cp.listen(addr)
	t.Cleanup(cp.stop)
	return cp
}

func (cp *controlPlane) listen(addr string) {
	cp.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; ; i++ { // a restarted server's port may linger a moment
		if ln, err = net.Listen("tcp", addr); err == nil || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	srv := serverv3.NewServer(context.Background(), cp.cache, serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			cp.mu.Lock()
			cp.headers = append(cp.headers, md)
			cp.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			cp.mu.Lock()
			cp.reqs = append(cp.reqs, req)
			cp.mu.Unlock()
			select {
			case cp.got <- struct{}{}:
			default:
			}
			return nil
		},
	})
	cp.gs = grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.gs, srv)
	go func() { _ = cp.gs.Serve(ln) }()
}

func (cp *controlPlane) stop() { cp.gs.Stop() }

// push sets the node's snapshot of version v.
func (cp *controlPlane) push(node, v string, confs ...*rlsconf.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(v, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// waitRequest waits for a request the server received matching ok.
func (cp *controlPlane) waitRequest(ok func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	cp.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		cp.mu.Lock()
		for _, r := range cp.reqs {
			if ok(r) {
				cp.mu.Unlock()
				return r
			}
		}
		cp.mu.Unlock()
		select {
		case <-cp.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			cp.t.Fatal("no such request reached the server in 10 s")
		}
	}
}

// follower runs xds.Run, applying each snapshot to a Service.
type follower struct {
	t       *testing.T
	svc     *envoyrls.Service
	applied chan *envoyrls.Config
	done    chan error
}

func follow(t *testing.T, o xds.Options) *follower {
	t.Helper()
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen: no refill
	f := &follower{
		t:       t,
		svc:     envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{}}, memstore.New(memstore.WithClock(clock))),
		applied: make(chan *envoyrls.Config, 16),
		done:    make(chan error, 1),
	}
	if o.Backoff.Initial == 0 {
		o.Backoff = xds.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		f.done <- xds.Run(ctx, o, func(c *envoyrls.Config) error {
			f.svc.SetConfig(c)
			f.applied <- c
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-f.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return 10 s after its context ended")
		}
	})
	return f
}

func (f *follower) waitApplied() *envoyrls.Config {
	f.t.Helper()
	select {
	case c := <-f.applied:
		return c
	case <-time.After(10 * time.Second):
		f.t.Fatal("no config applied in 10 s")
		return nil
	}
}

// noneApplied fails if a config is applied within d.
func (f *follower) noneApplied(d time.Duration) {
	f.t.Helper()
	select {
	case <-f.applied:
		f.t.Fatal("a config was applied")
	case <-time.After(d):
	}
}

// check asks the service once for the descriptor key=value of domain.
func (f *follower) check(domain, key, value string) rls.RateLimitResponse_Code {
	f.t.Helper()
	resp, err := f.svc.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{
		Domain:      domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.GetOverallCode()
}

// codes asks n times.
func (f *follower) codes(n int, domain, key, value string) []rls.RateLimitResponse_Code {
	out := make([]rls.RateLimitResponse_Code, n)
	for i := range out {
		out[i] = f.check(domain, key, value)
	}
	return out
}

const (
	ok   = rls.RateLimitResponse_OK
	over = rls.RateLimitResponse_OVER_LIMIT
)

func limited(key string, rpu uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu}}
}

func conf(name, domain string, ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
}

func same(a, b []rls.RateLimitResponse_Code) bool {
	return strings.Join(names(a), ",") == strings.Join(names(b), ",")
}

func names(cs []rls.RateLimitResponse_Code) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// TestPushUpdateNack: a pushed snapshot is applied and ACKed, and the
// service answers by it; an update is applied with the buckets of
// unchanged limits keeping their state; a bad update is NACKed with the
// problem in error_detail and the last good version, the config in force
// staying; a good one after it is applied.
func TestPushUpdateNack(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0")
	cp.push("node-a", "1", conf("r1", "web", limited("user", 2)))
	f := follow(t, xds.Options{ServerURL: cp.addr, NodeID: "node-a"})

	f.waitApplied()
	if got := f.codes(3, "web", "user", "alice"); !same(got, []rls.RateLimitResponse_Code{ok, ok, over}) {
		t.Fatalf("v1: alice got %v, want OK OK OVER_LIMIT", got)
	}
	first := cp.waitRequest(func(r *discoveryv3.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if first.GetNode().GetId() != "node-a" || first.GetTypeUrl() != xds.TypeURL || len(first.GetResourceNames()) != 0 {
		t.Errorf("first request: node %q type %q names %v, want node-a, %s, wildcard", first.GetNode().GetId(), first.GetTypeUrl(), first.GetResourceNames(), xds.TypeURL)
	}
	cp.waitRequest(func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "1" && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil
	}) // the ACK

	// v2: the same limit for user, a new one for team.
	cp.push("node-a", "2", conf("r1", "web", limited("user", 2), limited("team", 1)))
	f.waitApplied()
	if got := f.codes(1, "web", "user", "alice"); !same(got, []rls.RateLimitResponse_Code{over}) {
		t.Fatalf("v2: alice got %v, want OVER_LIMIT (her bucket kept its state)", got)
	}
	if got := f.codes(2, "web", "team", "red"); !same(got, []rls.RateLimitResponse_Code{ok, over}) {
		t.Fatalf("v2: team red got %v, want OK OVER_LIMIT", got)
	}
	cp.waitRequest(func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "2" && r.GetErrorDetail() == nil
	})

	// v3: a limit without a unit is invalid: NACKed, v2 stays.
	cp.push("node-a", "3", conf("r1", "web", limited("user", 2), &rlsconf.RateLimitDescriptor{Key: "team", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 5}}))
	nack := cp.waitRequest(func(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if nack.GetVersionInfo() != "2" || nack.GetResponseNonce() == "" {
		t.Errorf("NACK: version %q nonce %q, want version 2 (the last good) and the response's nonce", nack.GetVersionInfo(), nack.GetResponseNonce())
	}
	msg := nack.GetErrorDetail().GetMessage()
	for _, want := range []string{`resource "r1"`, "descriptors[1].rate_limit", "needs a unit"} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK error_detail %q does not say %q", msg, want)
		}
	}
	f.noneApplied(100 * time.Millisecond)
	if got := f.codes(1, "web", "team", "red"); !same(got, []rls.RateLimitResponse_Code{over}) {
		t.Fatalf("after the NACK: team red got %v, want OVER_LIMIT (v2 in force, its state kept)", got)
	}

	// v4: good again.
	cp.push("node-a", "4", conf("r1", "web", limited("user", 2)), conf("r2", "api", limited("key", 1)))
	c := f.waitApplied()
	if len(c.Domains) != 2 {
		t.Fatalf("v4: %d domains, want 2", len(c.Domains))
	}
	if got := f.codes(2, "api", "key", "k1"); !same(got, []rls.RateLimitResponse_Code{ok, over}) {
		t.Fatalf("v4: api key got %v, want OK OVER_LIMIT", got)
	}
	if got := f.codes(1, "web", "team", "red"); !same(got, []rls.RateLimitResponse_Code{ok}) {
		t.Fatalf("v4: team red got %v, want OK (no limit for team any more)", got)
	}
}

// TestDuplicateDomainNacked: two resources of one domain are refused.
func TestDuplicateDomainNacked(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0")
	cp.push("n", "1", conf("a", "web", limited("user", 1)), conf("b", "web", limited("team", 1)))
	follow(t, xds.Options{ServerURL: cp.addr, NodeID: "n"})
	nack := cp.waitRequest(func(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, `domain "web" is defined twice`) {
		t.Errorf("error_detail %q does not say the domain is defined twice", msg)
	}
	if nack.GetVersionInfo() != "" {
		t.Errorf("NACK version %q, want \"\" (nothing good yet)", nack.GetVersionInfo())
	}
}

// TestResourceNames: a named subscription receives only those resources.
func TestResourceNames(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0")
	cp.push("n", "1", conf("a", "web", limited("user", 1)), conf("b", "api", limited("key", 1)))
	f := follow(t, xds.Options{ServerURL: cp.addr, NodeID: "n", ResourceNames: []string{"b"}})
	c := f.waitApplied()
	if _, ok := c.Domains["api"]; !ok || len(c.Domains) != 1 {
		t.Fatalf("domains %v, want only api", c.Domains)
	}
}

// TestNodeMetadataAndHeaders: the node's metadata is in the requests, the
// headers in the stream's metadata.
func TestNodeMetadataAndHeaders(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0")
	cp.push("n", "1", conf("a", "web", limited("user", 1)))
	f := follow(t, xds.Options{ServerURL: cp.addr, NodeID: "n", NodeMetadata: map[string]string{"zone": "eu-1"}, Headers: map[string]string{"x-team": "red"}})
	f.waitApplied()
	req := cp.waitRequest(func(*discoveryv3.DiscoveryRequest) bool { return true })
	if z := req.GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); z != "eu-1" {
		t.Errorf("node metadata zone %q, want eu-1", z)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.headers) == 0 || len(cp.headers[0].Get("x-team")) != 1 || cp.headers[0].Get("x-team")[0] != "red" {
		t.Errorf("stream metadata %v, want x-team: red", cp.headers)
	}
}

// TestServerRestart: the server stops and starts again on the same port
// with a new snapshot; the client reconnects (with the last good version)
// and applies it.
func TestServerRestart(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0")
	cp.push("n", "1", conf("r", "web", limited("user", 1)))
	f := follow(t, xds.Options{ServerURL: cp.addr, NodeID: "n"})
	f.waitApplied()
	if got := f.codes(2, "web", "user", "u"); !same(got, []rls.RateLimitResponse_Code{ok, over}) {
		t.Fatalf("v1: got %v", got)
	}
	cp.stop()
	time.Sleep(100 * time.Millisecond) // a few failed reconnections
	cp2 := startControlPlane(t, cp.addr)
	cp2.push("n", "2", conf("r", "web", limited("user", 1), limited("team", 1)))
	c := f.waitApplied()
	if c.Domains["web"] == nil || len(c.Domains["web"].Children) != 2 {
		t.Fatalf("after the restart: %+v, want v2's two descriptors", c.Domains["web"])
	}
	if got := f.codes(1, "web", "user", "u"); !same(got, []rls.RateLimitResponse_Code{over}) {
		t.Fatalf("after the restart: user u got %v, want OVER_LIMIT (state kept)", got)
	}
	re := cp2.waitRequest(func(r *discoveryv3.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if re.GetVersionInfo() != "1" {
		t.Errorf("reconnecting request version %q, want 1 (the last good)", re.GetVersionInfo())
	}
}

// TestApplyErrorNacks: apply's error NACKs the snapshot.
func TestApplyErrorNacks(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0")
	cp.push("n", "1", conf("r", "web", limited("user", 1)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- xds.Run(ctx, xds.Options{ServerURL: cp.addr, NodeID: "n"}, func(*envoyrls.Config) error { return errors.New("not today") })
	}()
	nack := cp.waitRequest(func(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if nack.GetErrorDetail().GetMessage() != "not today" {
		t.Errorf("error_detail %q, want apply's error", nack.GetErrorDetail().GetMessage())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestRunOptions: Run refuses Options it cannot use at once.
func TestRunOptions(t *testing.T) {
	if err := xds.Run(context.Background(), xds.Options{}, nil); err == nil {
		t.Error("Run with no ServerURL returned nil")
	}
}
