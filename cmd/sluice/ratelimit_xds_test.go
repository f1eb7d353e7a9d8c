// Tests of startXDS (CONFIG_TYPE=GRPC_XDS_SOTW) against go-control-plane's SotW server: the first-config wait, FORCE_START_WITHOUT_INITIAL_CONFIG, mTLS, and the variables it refuses.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

// xdsServer is go-control-plane's SotW server over a snapshot cache on a
// free loopback port (with TLS when tc is not nil).
func xdsServer(t *testing.T, tc *tls.Config) (cachev3.SnapshotCache, string) {
	t.Helper()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gs := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(context.Background(), cache, nil))
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return cache, ln.Addr().String()
}

// pushLimit sets node's snapshot v: domain web, key user limited to rpu a minute.
func pushLimit(t *testing.T, cache cachev3.SnapshotCache, node, v string, rpu uint32) {
	t.Helper()
	c := &rlsconf.RateLimitConfig{Name: "web", Domain: "web", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu}},
		{Key: "v" + v, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 1}},
	}}
	snap, err := cachev3.NewSnapshot(v, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {c}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func emptyService() *envoyrls.Service {
	return envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{}}, memstore.New())
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func askUser(t *testing.T, svc *envoyrls.Service) rls.RateLimitResponse_Code {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "web",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOverallCode()
}

// askN asks n times, the codes separated by spaces.
func askN(t *testing.T, svc *envoyrls.Service, n int) string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = askUser(t, svc).String()
	}
	return strings.Join(out, " ")
}

type started struct {
	wait func() error
	err  error
}

// TestStartXDSWaitsForFirstConfig: without FORCE_START_WITHOUT_INITIAL_CONFIG
// startXDS returns only once a snapshot is applied; later snapshots are
// applied as they come, the bucket of an unchanged limit keeping its state;
// wait returns nil once the context ends.
func TestStartXDSWaitsForFirstConfig(t *testing.T) {
	cache, addr := xdsServer(t, nil)
	svc := emptyService()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := envOf(map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": addr, "CONFIG_GRPC_XDS_NODE_ID": "sluice-1", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms"})
	ch := make(chan started, 1)
	go func() {
		w, err := startXDS(ctx, env, svc, quiet())
		ch <- started{w, err}
	}()
	select {
	case s := <-ch:
		t.Fatalf("startXDS returned before any snapshot: %v", s.err)
	case <-time.After(300 * time.Millisecond):
	}
	pushLimit(t, cache, "sluice-1", "1", 2)
	var s started
	select {
	case s = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("startXDS did not return 10 s after the first snapshot")
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	if got := askN(t, svc, 3); got != "OK OK OVER_LIMIT" {
		t.Fatalf("v1: %s, want OK OK OVER_LIMIT", got)
	}
	pushLimit(t, cache, "sluice-1", "2", 2)
	deadline := time.Now().Add(10 * time.Second)
	for svc.Config().Domains["web"] == nil || len(svc.Config().Domains["web"].Children) != 2 || svc.Config().Domains["web"].Children[1].Key != "v2" {
		if time.Now().After(deadline) {
			t.Fatal("v2 not applied in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if askUser(t, svc) != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatal("after v2 (the same limit for user): the bucket lost its state")
	}
	cancel()
	if err := s.wait(); err != nil {
		t.Fatalf("wait: %v", err)
	}
}

// TestStartXDSForceStart: with FORCE_START_WITHOUT_INITIAL_CONFIG=true
// startXDS returns at once even with no server there.
func TestStartXDSForceStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	wait, err := startXDS(ctx, envOf(map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": addr, "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}), emptyService(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("startXDS took %v with FORCE_START_WITHOUT_INITIAL_CONFIG", d)
	}
	cancel()
	if err := wait(); err != nil {
		t.Fatalf("wait: %v", err)
	}

	// Without it, the context ending first is startXDS's error.
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := startXDS(ctx, envOf(map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": addr}), emptyService(), quiet()); err != context.DeadlineExceeded {
		t.Fatalf("startXDS with no server and no force: %v, want context.DeadlineExceeded", err)
	}
}

// TestStartXDSMutualTLS: CONFIG_GRPC_XDS_SERVER_USE_TLS with the client
// certificate and key, the server's CA and the name to verify (SAN)
// connects to a server that requires a client certificate; without the
// client certificate it does not.
func TestStartXDSMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "xds-ca")
	srvCert, srvKey := ca.issue(t, dir, "xds-server", true)
	cliCert, cliKey := ca.issue(t, dir, "sluice-client", false)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cache, addr := xdsServer(t, &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	pushLimit(t, cache, "default", "1", 1) // CONFIG_GRPC_XDS_NODE_ID defaults to "default"
	env := map[string]string{
		"CONFIG_GRPC_XDS_SERVER_URL":        addr,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":    "true",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": ca.file,
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN":    "sluice-auth", // the server certificate's DNS name
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":   cliCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":    cliKey,
	}
	svc := emptyService()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := startXDS(ctx, envOf(env), svc, quiet()); err != nil {
		t.Fatal(err)
	}
	if got := askN(t, svc, 2); got != "OK OVER_LIMIT" {
		t.Fatalf("the config over mTLS: %s, want OK OVER_LIMIT", got)
	}

	delete(env, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
	delete(env, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if _, err := startXDS(ctx2, envOf(env), emptyService(), quiet()); err != context.DeadlineExceeded {
		t.Fatalf("without a client certificate: %v, want no config (context.DeadlineExceeded)", err)
	}
}

// TestXDSOptionsRefused: a value startXDS cannot use stops it, naming the
// variable.
func TestXDSOptionsRefused(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate here"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []map[string]string{
		{"FORCE_START_WITHOUT_INITIAL_CONFIG": "sometimes"},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "yes please"},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/x.crt"},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/x.key"},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": notPEM},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(dir, "missing")},
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10"},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL": "-1s"},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "soon"},
		{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2"},
		{"XDS_CLIENT_BACKOFF_JITTER": "maybe"},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "4MB"},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "novalue"},
	} {
		var name string
		for k := range tc {
			if name == "" || k != "CONFIG_GRPC_XDS_SERVER_USE_TLS" {
				name = k
			}
		}
		_, err := startXDS(context.Background(), envOf(tc), emptyService(), quiet())
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: error %v, want one naming %s", tc, err, name)
		}
	}
}

// TestXDSOptionsRead: the variables land where the reference puts them.
func TestXDSOptionsRead(t *testing.T) {
	o, force, err := xdsOptions(envOf(map[string]string{
		"CONFIG_GRPC_XDS_NODE_METADATA":                 "zone=a,cluster=b,junk",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS":     "X-Team:red,authorization:Bearer t",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3s",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL":               "20s",
		"XDS_CLIENT_BACKOFF_JITTER":                     "false",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES":              "1048576",
		"FORCE_START_WITHOUT_INITIAL_CONFIG":            "1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if o.ServerURL != "localhost:18000" || o.NodeID != "default" || !force || o.TLS != nil {
		t.Errorf("defaults: url %q node %q force %v tls %v", o.ServerURL, o.NodeID, force, o.TLS)
	}
	if len(o.NodeMetadata) != 2 || o.NodeMetadata["zone"] != "a" || o.NodeMetadata["cluster"] != "b" {
		t.Errorf("node metadata %v", o.NodeMetadata)
	}
	if o.Headers["x-team"] != "red" || o.Headers["authorization"] != "Bearer t" {
		t.Errorf("headers %v", o.Headers)
	}
	if o.Backoff.Initial != 3*time.Second || o.Backoff.Max != 20*time.Second || o.Backoff.Jitter >= 0 || o.MaxRecvMsgSize != 1<<20 {
		t.Errorf("backoff %+v, max message %d", o.Backoff, o.MaxRecvMsgSize)
	}
}
