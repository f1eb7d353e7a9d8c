package envoyrls_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

// client starts the service on a loopback port and returns a real gRPC
// client of Envoy's generated types.
func client(t *testing.T) rls.RateLimitServiceClient {
	t.Helper()
	cfg, err := envoyrls.LoadDir("testdata/config")
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0)) // frozen: exact figures
	svc := envoyrls.NewService(cfg, memstore.New(memstore.WithClock(clock)))
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

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func ask(t *testing.T, c rls.RateLimitServiceClient, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rls.RateLimitResponse {
	t.Helper()
	r, err := c.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(r.Statuses), len(ds))
	}
	return r
}

const ok, over = rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT

// Over limit on one descriptor consumes nothing on the others, its own
// bucket included.
func TestOverLimitConsumesNothingElsewhere(t *testing.T) {
	c := client(t)
	ip := desc("remote_address", "10.0.0.1")
	login := desc("path", "/login")
	if r := ask(t, c, "edge", 0, ip, login); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 2 || r.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("first: %v", r)
	}
	r := ask(t, c, "edge", 0, ip, login) // /login is over (1/s); the IP bucket must not be charged
	if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over {
		t.Fatalf("second: %v", r)
	}
	if got := r.Statuses[1].DurationUntilReset.AsDuration(); got != time.Second {
		t.Fatalf("retry %v", got)
	}
	if r := ask(t, c, "edge", 0, ip); r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("the refused request charged the IP bucket: %v", r.Statuses[0])
	}
}

func TestMatchingPrecedence(t *testing.T) {
	c := client(t)
	for path, want := range map[string]string{"/login": "login_exact", "/api/users": "api_wildcard", "/other": "any_path"} {
		r := ask(t, c, "edge", 0, desc("path", path))
		if got := r.Statuses[0].CurrentLimit.GetName(); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	// Deeper than the tree, an unknown key or domain: OK, no limit.
	for _, r := range []*rls.RateLimitResponse{
		ask(t, c, "edge", 0, desc("path", "/login", "extra", "x")),
		ask(t, c, "edge", 0, desc("nope", "x")),
		ask(t, c, "unknown", 0, desc("path", "/login")),
		ask(t, c, "edge", 0, desc("tenant", "acme")), // a node without a limit
	} {
		if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
			t.Errorf("want OK with no limit: %v", r)
		}
	}
	// Nested: tenant=*, plan=free. One bucket per distinct value.
	for range 2 {
		ask(t, c, "edge", 0, desc("tenant", "a", "plan", "free"))
	}
	if r := ask(t, c, "edge", 0, desc("tenant", "a", "plan", "free")); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("tenant a: %v", r)
	}
	if r := ask(t, c, "edge", 0, desc("tenant", "b", "plan", "free")); r.OverallCode != ok {
		t.Fatalf("tenant b shares a's bucket: %v", r)
	}
}

func TestHitsAddend(t *testing.T) {
	c := client(t)
	ip := desc("remote_address", "10.0.0.9")
	if r := ask(t, c, "edge", 2, ip); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits 2: %v", r)
	}
	peek := desc("remote_address", "10.0.0.9")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 3 {
		if r := ask(t, c, "edge", 0, peek); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("peek: %v", r)
		}
	}
	if r := ask(t, c, "edge", 4, desc("remote_address", "10.0.0.10")); r.OverallCode != over {
		t.Fatalf("hits above the capacity: %v", r)
	}
}

func TestUnlimitedShadowAndHeaders(t *testing.T) {
	c := client(t)
	for range 5 {
		if r := ask(t, c, "edge", 0, desc("client", "internal")); r.OverallCode != ok {
			t.Fatalf("unlimited: %v", r)
		}
		if r := ask(t, c, "edge", 0, desc("client", "canary")); r.OverallCode != ok || r.Statuses[0].Code != ok {
			t.Fatalf("shadow mode refused: %v", r)
		}
	}
	r := ask(t, c, "edge", 0, desc("remote_address", "1.1.1.1"), desc("path", "/x"))
	h := map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if h["RateLimit-Policy"] != `"per_ip";q=3;w=60` || h["RateLimit"] != `"per_ip";r=2;t=20` {
		t.Fatalf("headers %v", h)
	}
	if r := ask(t, c, "mongo_cps", 0, desc("database", "users")); r.Statuses[0].LimitRemaining != 499 {
		t.Fatalf("second file: %v", r)
	}
}

func TestConfigErrors(t *testing.T) {
	for src, want := range map[string]string{
		"descriptors: []\n":                                       "missing domain",
		"domain: d\ndescriptors:\n  - value: x\n":                 "needs a key",
		"domain: d\ndescriptors:\n  - key: k\n    replaces: []\n": `"replaces" belongs in the descriptor's rate_limit`,
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n": "unit",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n":   "at least 0",
		"domain: d\ndescriptors:\n  - key: k\n    value: a\n    share_threshold: true\n":                 "wildcard",
		"domain: d\nfoo: 1\n": `unknown field "foo"`,
		"domain: [\n":         "YAML",
	} {
		if _, _, err := envoyrls.Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: d\ndescriptors: []\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: d\ndescriptors: []\n"), 0o644)
	if _, err := envoyrls.LoadDir(dir); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Fatalf("duplicate domain: %v", err)
	}
	if _, err := envoyrls.LoadDir(t.TempDir()); err == nil {
		t.Fatal("empty dir accepted")
	}
}

func FuzzParse(f *testing.F) {
	b, _ := os.ReadFile("testdata/config/edge.yaml")
	f.Add(b)
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: day, requests_per_unit: 7}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    quota_mode: true\n    detailed_metric: true\n" +
		"    value_to_metric: true\n    metadata: {x: [1]}\n    rate_limit: {unit: minute, requests_per_unit: 0, name: n, replaces: [{name: m}]}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		// Never panics; an error is Errors, each problem with a message.
		domain, root, err := envoyrls.Parse(src)
		var es envoyrls.Errors
		switch {
		case err == nil:
			if domain == "" || root == nil {
				t.Fatalf("no error, domain %q, root %v", domain, root)
			}
		case !errors.As(err, &es) || len(es) == 0 || !errors.Is(err, envoyrls.ErrInvalid):
			t.Fatalf("error %T %v", err, err)
		default:
			for _, e := range es {
				if e.Msg == "" || e.Line < 0 || e.Column < 0 {
					t.Fatalf("problem %#v", e)
				}
			}
		}
	})
}

// A sluice policy over gRPC: each descriptor is one limiter request, all
// decided as one.
func TestPolicyServiceAllOrNothing(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: per_ip
    key: "ip:{remote_address}"
    when: {domain: edge}
    capacity: 2
    refill_per_second: 1
  - name: login
    key: "path:{path}"
    when: {path: /login}
    capacity: 1
    refill_per_second: 0.5
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	l, err := limiter.New(p, memstore.New(memstore.WithClock(clock)))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gs := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(gs, envoyrls.NewPolicyService(l))
	go gs.Serve(ln)
	defer gs.Stop()
	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	c := rls.NewRateLimitServiceClient(conn)
	ip, login := desc("remote_address", "10.0.0.1"), desc("path", "/login")
	if r := ask(t, c, "edge", 0, ip, login); r.OverallCode != ok || r.Statuses[0].CurrentLimit.GetName() != "per_ip" || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("first: %v", r)
	} else if l0, l1 := r.Statuses[0].CurrentLimit, r.Statuses[1].CurrentLimit; l0.GetRequestsPerUnit() != 1 || l0.GetUnit() != rls.RateLimitResponse_RateLimit_SECOND ||
		l1.GetRequestsPerUnit() != 30 || l1.GetUnit() != rls.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("current_limit states the refill rate (1/s, 0.5/s): %v, %v", l0, l1)
	}
	r := ask(t, c, "edge", 0, ip, login)
	if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over || r.Statuses[1].DurationUntilReset.AsDuration() != 2*time.Second {
		t.Fatalf("second: %v", r)
	}
	if r := ask(t, c, "edge", 0, ip); r.Statuses[0].LimitRemaining != 0 || r.OverallCode != ok {
		t.Fatalf("the refused call charged per_ip: %v", r)
	}
	if r := ask(t, c, "other", 0, desc("remote_address", "10.0.0.1")); r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("domain is a descriptor: %v", r)
	}
	if r := ask(t, c, "edge", 5, desc("remote_address", "10.0.0.2")); r.OverallCode != over {
		t.Fatalf("hits above capacity: %v", r)
	}
}

func TestOversizedRequestsRefused(t *testing.T) {
	c := client(t)
	many := &rls.RateLimitRequest{Domain: "edge"}
	for range envoyrls.MaxDescriptors + 1 {
		many.Descriptors = append(many.Descriptors, desc("path", "/x"))
	}
	long := &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", strings.Repeat("x", envoyrls.MaxEntryBytes+1))}}
	for _, req := range []*rls.RateLimitRequest{many, long} {
		if _, err := c.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%d descriptors: %v", len(req.Descriptors), err)
		}
	}
}

// A calendar quota over gRPC: current_limit is its limit per Envoy's unit
// of its period, the wait of a refusal the time to the period's end.
func TestPolicyServiceQuota(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: daily
    key: "user:{user}"
    algorithm: quota
    limit: 2
    period: day
    timezone: Europe/Berlin
  - name: monthly
    key: "m:{m}"
    algorithm: quota
    limit: 1000
    period: month
  - name: weekly
    key: "w:{w}"
    algorithm: quota
    limit: 7
    period: week
  - name: yearly
    key: "y:{y}"
    algorithm: quota
    limit: 9
    period: year
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Date(2026, 3, 29, 20, 0, 0, 0, time.UTC)) // 22:00 in Berlin on its 23-hour day
	l, err := limiter.New(p, memstore.New(memstore.WithClock(clock)))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gs := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(gs, envoyrls.NewPolicyService(l))
	go gs.Serve(ln)
	defer gs.Stop()
	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	c := rls.NewRateLimitServiceClient(conn)
	u := desc("user", "ann")
	for _, want := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		rpu  uint32
		unit rls.RateLimitResponse_RateLimit_Unit
	}{{desc("w", "1"), 7, rls.RateLimitResponse_RateLimit_WEEK}, {desc("y", "1"), 9, rls.RateLimitResponse_RateLimit_YEAR},
		{desc("m", "1"), 1000, rls.RateLimitResponse_RateLimit_MONTH}} {
		if r := ask(t, c, "d", 0, want.d); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != want.rpu || r.Statuses[0].CurrentLimit.GetUnit() != want.unit {
			t.Fatalf("%v: %v", want.d, r)
		}
	}
	r := ask(t, c, "d", 2, u)
	if r.OverallCode != ok || r.Statuses[0].CurrentLimit.GetName() != "daily" || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 ||
		r.Statuses[0].CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_DAY || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("first: %v", r)
	}
	r = ask(t, c, "d", 0, u)
	if r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != 2*time.Hour {
		t.Fatalf("refused until Berlin's midnight: %v", r)
	}
	clock.Advance(2 * time.Hour)
	if r := ask(t, c, "d", 0, u); r.OverallCode != ok || r.Statuses[0].CurrentLimit.GetName() != "daily" || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("a new day: %v", r)
	}
}

// shadow_mode in the Envoy format maps onto the policy mode's shadow:
// never refusing (code OK), its RateLimit fields as if enforced, and its
// would-be refusals counted as result="shadow_rejected".
func TestShadowModeCountedApart(t *testing.T) {
	cfg, err := envoyrls.LoadDir("testdata/config")
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	svc := envoyrls.NewService(cfg, memstore.New(memstore.WithClock(clock)))
	reg := prometheus.NewRegistry()
	if err := svc.Register(reg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last *rls.RateLimitResponse
	for range 3 { // canary_shadow: 1 per second
		r, err := svc.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", "canary")}})
		if err != nil || r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[0].Code != rls.RateLimitResponse_OK {
			t.Fatalf("rule: shadow_mode never refuses: %v %v", r, err)
		}
		last = r
	}
	h := map[string]string{}
	for _, hv := range last.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if !strings.Contains(h["RateLimit"], `"canary_shadow";r=0`) {
		t.Fatalf("rule: the RateLimit fields are as if enforced: %v", h)
	}
	if got := counterOf(t, reg, "canary_shadow", "shadow_rejected"); got != 2 {
		t.Fatalf("rule: shadow_mode's would-be refusals count as shadow_rejected: %v", got)
	}
	if got := counterOf(t, reg, "canary_shadow", "admitted"); got != 1 {
		t.Fatalf("admitted: %v", got)
	}
}

// counterOf is sluice_decisions_total{limit, result} in reg.
func counterOf(t *testing.T, reg *prometheus.Registry, limit, result string) float64 {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if mf.GetName() == "sluice_decisions_total" && l["limit"] == limit && l["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s %s series", limit, result)
	return 0
}
