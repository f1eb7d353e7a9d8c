// The real `sluice ratelimit` process with CONFIG_TYPE=GRPC_XDS_SOTW, following go-control-plane's SotW server: push, update, NACK, server restart.

package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// xdsCP is go-control-plane's SotW server over a snapshot cache,
// recording the NACKs it receives.
type xdsCP struct {
	cache cachev3.SnapshotCache
	addr  string
	gs    *grpc.Server
	mu    sync.Mutex
	nacks []*discoveryv3.DiscoveryRequest
}

// startXDSCP listens on addr ("127.0.0.1:0": a free port).
func startXDSCP(t *testing.T, addr string) *xdsCP {
	t.Helper()
	cp := &xdsCP{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the port of a stopped server may linger
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	srv := serverv3.NewServer(context.Background(), cp.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				cp.mu.Lock()
				cp.nacks = append(cp.nacks, req)
				cp.mu.Unlock()
			}
			return nil
		},
	})
	cp.gs = grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.gs, srv)
	go func() { _ = cp.gs.Serve(ln) }()
	t.Cleanup(cp.gs.Stop)
	return cp
}

func (cp *xdsCP) push(t *testing.T, node, v string, confs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(v, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// waitNack waits for a NACK and returns it.
func (cp *xdsCP) waitNack(t *testing.T) *discoveryv3.DiscoveryRequest {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		cp.mu.Lock()
		n := len(cp.nacks)
		cp.mu.Unlock()
		if n > 0 {
			cp.mu.Lock()
			defer cp.mu.Unlock()
			return cp.nacks[0]
		}
	}
	t.Fatal("no NACK reached the server in 15 s")
	return nil
}

func perMinute(key string, rpu uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu}}
}

// waitApplied waits for p to log that snapshot version v is applied.
func waitApplied(t *testing.T, p *rlProc, v string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(p.log(), "\n") {
			if strings.Contains(l, "config applied (ACK)") && strings.Contains(l, `"version":"`+v+`"`) {
				return
			}
		}
	}
	t.Fatalf("snapshot %s not applied in 15 s\n%s", v, p.log())
}

// TestRatelimitXDS: `sluice ratelimit` with CONFIG_TYPE=GRPC_XDS_SOTW
// answers by the server's snapshot, takes an update with the buckets of
// unchanged limits intact, NACKs a bad one keeping the config in force,
// and follows the server through its restart on the same port.
func TestRatelimitXDS(t *testing.T) {
	cp := startXDSCP(t, "127.0.0.1:0")
	cp.push(t, "sluice-test", "1", &rlsconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{perMinute("user", 2)}})
	env := rlEnv(t, t.TempDir(), "")
	env["CONFIG_TYPE"] = "GRPC_XDS_SOTW"
	env["CONFIG_GRPC_XDS_SERVER_URL"] = cp.addr
	env["CONFIG_GRPC_XDS_NODE_ID"] = "sluice-test"
	env["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"] = "100ms"
	env["XDS_CLIENT_BACKOFF_MAX_INTERVAL"] = "500ms"
	p := startRatelimit(t, env)
	c := rlClient(t, p)
	user := rlRequest("edge", [][][2]string{{{"user", "u1"}}}, 0)
	team := rlRequest("edge", [][][2]string{{{"team", "red"}}}, 0)
	for i, want := range []rls.RateLimitResponse_Code{ok, ok, over} {
		if got := rlAsk(t, c, user).GetOverallCode(); got != want {
			t.Fatalf("v1 ask %d: %v, want %v", i+1, got, want)
		}
	}

	cp.push(t, "sluice-test", "2", &rlsconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{perMinute("user", 2), perMinute("team", 1)}})
	waitApplied(t, p, "2")
	if got := rlAsk(t, c, user).GetOverallCode(); got != over {
		t.Fatalf("v2, user (limit unchanged): %v, want OVER_LIMIT (state kept)", got)
	}
	if a, b := rlAsk(t, c, team).GetOverallCode(), rlAsk(t, c, team).GetOverallCode(); a != ok || b != over {
		t.Fatalf("v2, team: %v %v, want OK OVER_LIMIT", a, b)
	}

	bad := &rlsconf.RateLimitDescriptor{Key: "team", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 9}} // no unit
	cp.push(t, "sluice-test", "3", &rlsconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{perMinute("user", 2), bad}})
	nack := cp.waitNack(t)
	if msg := nack.GetErrorDetail().GetMessage(); nack.GetVersionInfo() != "2" || !strings.Contains(msg, `resource "edge"`) || !strings.Contains(msg, "needs a unit") {
		t.Fatalf("NACK version %q error_detail %q, want version 2 and the problem", nack.GetVersionInfo(), msg)
	}
	if got := rlAsk(t, c, team).GetOverallCode(); got != over {
		t.Fatalf("after the NACK, team: %v, want OVER_LIMIT (v2 in force)", got)
	}
	// The snapshots count as the reference counts its config loads.
	if ok, bad := rlMetricSum(t, p.metrics, "ratelimit_service_config_load_success"), rlMetricSum(t, p.metrics, "ratelimit_service_config_load_error"); ok < 2 || bad < 1 {
		t.Fatalf("config_load_success %v, config_load_error %v: want >= 2 (v1, v2) and >= 1 (v3 NACKed)", ok, bad)
	}

	addr := cp.addr
	cp.gs.Stop()
	time.Sleep(300 * time.Millisecond) // reconnections fail meanwhile
	if got := rlAsk(t, c, user).GetOverallCode(); got != over {
		t.Fatalf("server down, user: %v, want OVER_LIMIT (the config stays)", got)
	}
	cp2 := startXDSCP(t, addr)
	cp2.push(t, "sluice-test", "4", &rlsconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{perMinute("user", 2), perMinute("region", 1)}})
	waitApplied(t, p, "4")
	region := rlRequest("edge", [][][2]string{{{"region", "eu"}}}, 0)
	if a, b := rlAsk(t, c, region).GetOverallCode(), rlAsk(t, c, region).GetOverallCode(); a != ok || b != over {
		t.Fatalf("after the restart, region: %v %v, want OK OVER_LIMIT", a, b)
	}
	if got := rlAsk(t, c, team).GetOverallCode(); got != ok {
		t.Fatalf("after the restart, team (no limit in v4): %v, want OK", got)
	}
}

// TestRatelimitXDSFirstSnapshot: before the first snapshot `sluice
// ratelimit` answers its health check and ShouldRateLimit unavailable; the
// snapshot makes both answer.
func TestRatelimitXDSFirstSnapshot(t *testing.T) {
	cp := startXDSCP(t, "127.0.0.1:0")
	env := rlEnv(t, t.TempDir(), "")
	env["CONFIG_TYPE"] = "GRPC_XDS_SOTW"
	env["CONFIG_GRPC_XDS_SERVER_URL"] = cp.addr
	env["CONFIG_GRPC_XDS_NODE_ID"] = "n1"
	cmd := rlCommand(context.Background(), env)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &rlProc{http: "http://127.0.0.1:" + env["PORT"], grpc: "127.0.0.1:" + env["GRPC_PORT"]}
	c := rlClient(t, p)
	req := rlRequest("edge", [][][2]string{{{"user", "u1"}}}, 0)
	var code codes.Code
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.ShouldRateLimit(ctx, req)
		cancel()
		code = status.Code(err)
		if code == codes.Unavailable && err != nil && strings.Contains(err.Error(), "snapshot") || time.Now().After(deadline) {
			break
		}
	}
	if code != codes.Unavailable {
		t.Fatalf("before the first snapshot: %v, want UNAVAILABLE", code)
	}
	if resp, err := http.Get(p.http + "/healthcheck"); err != nil || resp.StatusCode == 200 {
		t.Fatalf("before the first snapshot: /healthcheck %v %v, want not 200", resp, err)
	} else {
		resp.Body.Close()
	}
	cp.push(t, "n1", "1", &rlsconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{perMinute("user", 1)}})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(p.http + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("/healthcheck not 200 15 s after the first snapshot")
		}
	}
	if a, b := rlAsk(t, c, req).GetOverallCode(), rlAsk(t, c, req).GetOverallCode(); a != ok || b != over {
		t.Fatalf("after the first snapshot: %v %v, want OK OVER_LIMIT", a, b)
	}
}
