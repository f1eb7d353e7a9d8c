// envoyproxy/ratelimit's integration-test scripts (replaces, shadow, quota, wildcards, detailed metrics) and its environment's errors, against `sluice ratelimit`.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/redistest"
)

// rtExample is the reference's examples/ratelimit/config/example.yaml,
// which its integration-test scripts run against (through Envoy; here the
// descriptors Envoy makes of their headers go over gRPC directly).
const rtExample = `domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: bar
        value: banned
        rate_limit:
          name: banned_limit
          unit: minute
          requests_per_unit: 0
      - key: baz
        rate_limit:
          unit: second
          requests_per_unit: 1
      - key: baz
        value: not-so-shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: baz
        value: shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
        shadow_mode: true
      - key: bay
        rate_limit:
          unlimited: true
  - key: unspec
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: qux
    rate_limit:
      unlimited: true
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      service_with_quota:
        name: "service_2"
`

// The reference's wildcard test config (test/config/wildcard.yaml).
const rtWildcard = `domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noWild
    value: foo
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noVal
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: midWild
    value: bar*b
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: multiWild
    value: foo*bar*baz
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit:
          unit: minute
          requests_per_unit: 20
`

// startExample is `sluice ratelimit` on Redis with the example and
// wildcard configurations, laid out as the reference's docker-compose
// integration test mounts them (RUNTIME_ROOT=/data,
// RUNTIME_SUBDIRECTORY=ratelimit, RUNTIME_WATCH_ROOT=false).
func startExample(t *testing.T) (*rlProc, rls.RateLimitServiceClient) {
	t.Helper()
	r := redistest.New(t)
	root := filepath.Join(t.TempDir(), "data")
	writeRuntime(t, root, map[string]string{"ratelimit/config/example.yaml": rtExample,
		"ratelimit/config/wildcard.yaml": rtWildcard, "ratelimit/config/share_threshold.yaml": rtShareThreshold})
	env := rlEnv(t, root, r.Addr)
	env["RUNTIME_WATCH_ROOT"] = "false"
	p := startRatelimit(t, env)
	return p, rlClient(t, p)
}

// headers are the descriptors Envoy's example proxy config makes of a
// request's headers (examples/envoy/proxy.yaml: one descriptor per
// rate_limits entry whose headers are all present).
func headers(h map[string]string, entries ...[]string) *rls.RateLimitRequest {
	var ds [][][2]string
	for _, keys := range entries {
		var d [][2]string
		for _, k := range keys {
			v, ok := h[k]
			if !ok {
				d = nil
				break
			}
			d = append(d, [2]string{k, v})
		}
		if d != nil {
			ds = append(ds, d)
		}
	}
	return rlRequest("rl", ds, 1)
}

// The routes of the example proxy.
func twoheader(h map[string]string) *rls.RateLimitRequest {
	return headers(h, []string{"foo", "bar"}, []string{"foo", "baz"})
}

func fourheader(h map[string]string) *rls.RateLimitRequest {
	return headers(h, []string{"foo", "bar"}, []string{"source_cluster", "destination_cluster"})
}

func fiveheader(h map[string]string) *rls.RateLimitRequest {
	return headers(h, []string{"foo", "bar"}, []string{"source_cluster", "destination_cluster"}, []string{"category"})
}

// okOrLimited asserts a call's overall code: admitted (true) or not.
func okOrLimited(t *testing.T, c rls.RateLimitServiceClient, what string, req *rls.RateLimitRequest, admitted bool) {
	t.Helper()
	r := rlAsk(t, c, req)
	if (r.GetOverallCode() == ok) != admitted {
		t.Fatalf("%s: %v %v, want admitted %v", what, r.GetOverallCode(), rlStatuses(r), admitted)
	}
}

// integration-test/scripts/replaces.sh.
func TestRatelimitReplaces(t *testing.T) {
	_, c := startExample(t)
	h := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	// replaces raises the limit: banned_limit (0 a minute) replaced by
	// override's 2 a minute.
	okOrLimited(t, c, "banned", twoheader(h("foo", "bkthomps", "bar", "banned")), false)
	okOrLimited(t, c, "banned, mock", fourheader(h("foo", "bkthomps", "bar", "banned", "source_cluster", "proxy", "destination_cluster", "mock")), false)
	override := fourheader(h("foo", "bkthomps", "bar", "banned", "source_cluster", "proxy", "destination_cluster", "override"))
	okOrLimited(t, c, "override 1", override, true)
	okOrLimited(t, c, "override 2", override, true)
	okOrLimited(t, c, "override 3", override, false)

	// replaces leaves the replaced limit as it was: bkthomps (1 a minute)
	// replaced by destination bkthomps (2 a minute) is untouched.
	both := fourheader(h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "bkthomps"))
	okOrLimited(t, c, "bkthomps 1", both, true)
	okOrLimited(t, c, "bkthomps 2", both, true)
	okOrLimited(t, c, "bkthomps 3", both, false)
	notBk := fourheader(h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "not_bkthomps"))
	okOrLimited(t, c, "not_bkthomps 1", notBk, true)
	okOrLimited(t, c, "not_bkthomps 2", notBk, false)
	okOrLimited(t, c, "bkthomps 4", both, false)

	// One limit replaces two: category account (4 a minute) replaces
	// bkthomps and fake_name.
	five := fiveheader(h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"))
	for i := range 4 {
		okOrLimited(t, c, fmt.Sprint("five ", i+1), five, true)
	}
	okOrLimited(t, c, "five 5", five, false)
	foo2 := twoheader(h("foo", "foo_2", "bar", "bkthomps"))
	okOrLimited(t, c, "foo_2 1", foo2, true)
	okOrLimited(t, c, "foo_2 2", foo2, false)
	fake := fourheader(h("foo", "foo_3", "bar", "bar_3", "source_cluster", "proxy", "destination_cluster", "fake"))
	okOrLimited(t, c, "fake 1", fake, true)
	okOrLimited(t, c, "fake 2", fake, true)
	okOrLimited(t, c, "fake 3", fake, false)
	okOrLimited(t, c, "five 6", five, false)

	// A replaced descriptor's status is OK with no limit (the reference's
	// nil limit for it).
	r := rlAsk(t, c, fourheader(h("foo", "x", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "bkthomps")))
	if st := r.Statuses[0]; st.GetCode() != ok || st.GetCurrentLimit() != nil {
		t.Fatalf("replaced status %v", st)
	}
}

// integration-test/scripts/trigger-shadow-mode-key.sh and
// trigger-ratelimit.sh, with the shadow_mode and over_limit series.
func TestRatelimitShadow(t *testing.T) {
	p, c := startExample(t)
	shady := twoheader(map[string]string{"foo": "pelle", "baz": "shady"})
	for i := range 6 {
		okOrLimited(t, c, fmt.Sprint("shady ", i+1), shady, true)
	}
	lbl := `domain="rl",key1="foo",key2="baz_shady"`
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_shadow_mode", lbl); v != 3 {
		t.Fatalf("shadow_mode %v", v)
	}
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_over_limit", lbl); v != 3 {
		t.Fatalf("over_limit %v", v)
	}
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_total_hits", lbl); v != 6 {
		t.Fatalf("total_hits %v", v)
	}
	// unlimited: OK, limit_remaining the largest uint32, as the
	// reference answers it.
	rlExpect(t, "qux", rlAsk(t, c, rlRequest("rl", [][][2]string{{{"qux", "x"}}, {{"foo", "f"}, {"bay", "y"}}}, 1)), ok,
		rlStatus{ok, 0, 0, math.MaxUint32}, rlStatus{ok, 0, 0, math.MaxUint32})
	notShady := twoheader(map[string]string{"foo": "pelle", "baz": "not-so-shady"})
	for i := range 3 {
		okOrLimited(t, c, fmt.Sprint("not-so-shady ", i+1), notShady, true)
	}
	okOrLimited(t, c, "not-so-shady 4", notShady, false)
	okOrLimited(t, c, "not-so-shady 5", notShady, false)
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_near_limit", `domain="rl",key1="foo",key2="baz_not-so-shady"`); v != 1 {
		t.Fatalf("near_limit %v", v) // the third of 3: floor(3*0.8)=2 used before it
	}
}

// integration-test/scripts/quota.sh: quota_mode descriptors fail a call
// only when all of them are over (envoyproxy/ratelimit#1059).
func TestRatelimitQuota(t *testing.T) {
	_, c := startExample(t)
	quota := rlRequest("rl", [][][2]string{{{"service", "service_1"}}, {{"service", "service_2"}}}, 1)
	rlExpect(t, "1st", rlAsk(t, c, quota), ok, rlStatus{ok, 1, min_, 0}, rlStatus{ok, 2, min_, 1})
	// service_1 is over; service_2 is not: admitted, service_1's status
	// over.
	rlExpect(t, "2nd", rlAsk(t, c, quota), ok, rlStatus{over, 1, min_, 0}, rlStatus{ok, 2, min_, 0})
	rlExpect(t, "3rd", rlAsk(t, c, quota), over, rlStatus{over, 1, min_, 0}, rlStatus{over, 2, min_, 0})
	// A quota descriptor beside an ordinary one over its limit: refused,
	// and the quota descriptor only peeked (OK: taking nothing is within
	// the limit).
	q2 := rlRequest("rl", [][][2]string{{{"foo", "q"}, {"bar", "banned"}}, {{"service", "service_2"}}}, 1)
	rlExpect(t, "with banned", rlAsk(t, c, q2), over, rlStatus{over, 0, min_, 0}, rlStatus{ok, 2, min_, 0})
}

// The reference's wildcard matching (test/config/wildcard.yaml, its
// TestWildcardConfig) and its TestShareThreshold, over gRPC.
func TestRatelimitWildcard(t *testing.T) {
	p, c := startExample(t)
	ask := func(e ...[2]string) *rls.RateLimitResponse {
		return rlAsk(t, c, rlRequest("test-domain", [][][2]string{e}, 1))
	}
	rlExpect(t, "wild foo1", ask([2]string{"wild", "foo1"}), ok, rlStatus{ok, 20, min_, 19})
	rlExpect(t, "wild foo2: its own bucket", ask([2]string{"wild", "foo2"}), ok, rlStatus{ok, 20, min_, 19})
	rlExpect(t, "wild foo (the * empty)", ask([2]string{"wild", "foo"}), ok, rlStatus{ok, 20, min_, 19})
	rlExpect(t, "wild bar: no match", ask([2]string{"wild", "bar"}), ok, rlStatus{code: ok})
	rlExpect(t, "noWild foo1: no match", ask([2]string{"noWild", "foo1"}), ok, rlStatus{code: ok})
	rlExpect(t, "midWild barab", ask([2]string{"midWild", "barab"}), ok, rlStatus{ok, 20, min_, 19})
	rlExpect(t, "midWild barb", ask([2]string{"midWild", "barb"}), ok, rlStatus{ok, 20, min_, 19})
	rlExpect(t, "midWild bara: no match", ask([2]string{"midWild", "bara"}), ok, rlStatus{code: ok})
	rlExpect(t, "multiWild", ask([2]string{"multiWild", "foo1bar2baz"}), ok, rlStatus{ok, 10, min_, 9})
	rlExpect(t, "multiWild out of order: no match", ask([2]string{"multiWild", "foobazbar"}), ok, rlStatus{code: ok})
	rlExpect(t, "nested", ask([2]string{"nestedWild", "val1"}, [2]string{"wild", "goo2"}), ok, rlStatus{ok, 20, min_, 19})
	rlExpect(t, "nested: no match", ask([2]string{"nestedWild", "val1"}, [2]string{"wild", "foo2"}), ok, rlStatus{code: ok})
	// Without detailed_metric, every value a wildcard matches is counted
	// under the wildcard.
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_total_hits", `domain="test-domain",key1="wild_foo*"`); v != 3 {
		t.Fatalf("wild_foo* total_hits %v", v)
	}

	// share_threshold: every value of files/* shares one bucket.
	share := func(k, v string) *rls.RateLimitResponse {
		return rlAsk(t, c, rlRequest("share-threshold-test", [][][2]string{{{k, v}}}, 1))
	}
	for i := range 10 {
		rlExpect(t, fmt.Sprint("files/a.pdf ", i+1), share("files", "files/a.pdf"), ok, rlStatus{ok, 10, hour, uint32(9 - i)})
	}
	rlExpect(t, "files/b.csv", share("files", "files/b.csv"), over, rlStatus{over, 10, hour, 0})
	for i := range 10 {
		rlExpect(t, "files_no_share", share("files_no_share", fmt.Sprintf("files_no_share/%d-%d", time.Now().UnixNano(), i)), ok, rlStatus{ok, 10, hour, 9})
	}
}

// integration-test/scripts/value-included-in-stats-key-when-unspecified.sh:
// detailed_metric puts the request's value in the series.
func TestRatelimitDetailedMetrics(t *testing.T) {
	p, c := startExample(t)
	unspec := rlRequest("rl", [][][2]string{{{"unspec", "unspecified_value"}}}, 1)
	okOrLimited(t, c, "1", unspec, true)
	okOrLimited(t, c, "2", unspec, true)
	okOrLimited(t, c, "3", unspec, false)
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_over_limit", `domain="rl",key1="unspec_unspecified_value"`); v != 1 {
		t.Fatalf("over_limit of unspec_unspecified_value: %v", v)
	}
	// Without it a key-only node counts every value under its key.
	okOrLimited(t, c, "qux", rlRequest("rl", [][][2]string{{{"foo", "a"}}}, 1), true)
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_total_hits", `domain="rl",key1="foo"`); v != 1 {
		t.Fatalf("total_hits of foo: %v", v)
	}
}

// A variable set to what sluice cannot honour stops the start, naming it
// (exit status 2); unknown variables are ignored.
func TestRatelimitEnvErrors(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic})
	foreign := filepath.Join(t.TempDir(), "mapper.yaml")
	if err := os.WriteFile(foreign, []byte(foreignMapping), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"USE_STATSD": "true"}, "USE_STATSD"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE"},
		{map[string]string{"REDIS_URL": "127.0.0.1:1", "REDIS_TYPE": "sentinel", "REDIS_SOCKET_TYPE": "tcp"}, "REDIS_TYPE"},
		{map[string]string{"REDIS_URL": "/var/run/nutcracker/ratelimit.sock", "REDIS_SOCKET_TYPE": "unix"}, "REDIS_SOCKET_TYPE"},
		{map[string]string{"REDIS_URL": "127.0.0.1:1", "REDIS_PERSECOND": "true"}, "REDIS_PERSECOND"},
		{map[string]string{"CONFIG_TYPE": "KUBERNETES"}, "CONFIG_TYPE"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"PORT": "http"}, "PORT"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_TLS_CERT"},
		{map[string]string{"SHADOW_MODE": "true"}, "SHADOW_MODE"},
		{map[string]string{"PROMETHEUS_MAPPER_YAML": foreign}, "PROMETHEUS_MAPPER_YAML"},
		{map[string]string{"RUNTIME_SUBDIRECTORY": "nothing-here"}, "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "maybe"}, "CONFIG_GRPC_XDS_SERVER_USE_TLS"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "::::"}, "CONFIG_GRPC_XDS_SERVER_URL"},
		{map[string]string{"EXPIRATION_JITTER_MAX_SECONDS": "abc"}, "EXPIRATION_JITTER_MAX_SECONDS"},
		{map[string]string{"SLUICE_INSTANCES": "0"}, "SLUICE_INSTANCES"},
		{map[string]string{"REDIS_URL": "127.0.0.1:1", "REDIS_AUTH": "s3cret", "REDIS_POOL_SIZE": "-1"}, "--store-pool-size"},
		{map[string]string{"REDIS_URL": "127.0.0.1:1", "REDIS_TIMEOUT": "soon"}, "REDIS_TIMEOUT"},
		{map[string]string{"REDIS_TLS": "yes"}, "REDIS_TLS"}, // (without REDIS_URL too, as the reference)
		{map[string]string{"REDIS_POOL_SIZE": "ten"}, "REDIS_POOL_SIZE"},
	} {
		env := rlEnv(t, root, "")
		for k, v := range tc.set {
			env[k] = v
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := rlCommand(ctx, env).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "s3cret") {
			t.Errorf("%v: %v, output %q; want an error naming %s (and no password)", tc.set, err, out, tc.want)
		}
	}
	// Accepted: unknown variables, the reference's no-effect ones, and
	// an empty configuration directory (no domain: every call is OK).
	empty := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(empty, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := rlEnv(t, empty, "")
	env["SOMETHING_ELSE"], env["EXPIRATION_JITTER_MAX_SECONDS"], env["LOCAL_CACHE_SIZE_IN_BYTES"] = "1", "300", "1000"
	p := startRatelimit(t, env)
	rlExpect(t, "empty", rlAsk(t, rlClient(t, p), rlRequest("basic", [][][2]string{{{"key1", "x"}}}, 1)), ok, rlStatus{code: ok})
}

// GRPC_SERVER_USE_TLS with GRPC_CLIENT_TLS_CACERT: the gRPC server asks
// for a client certificate that CA signs (the reference's mTLS test).
func TestRatelimitMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "rl-ca")
	srvCert, srvKey := ca.issue(t, dir, "server", true)
	cliCert, cliKey := ca.issue(t, dir, "client", false)
	root := filepath.Join(dir, "data")
	writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic})
	env := rlEnv(t, root, "")
	env["GRPC_SERVER_USE_TLS"], env["GRPC_SERVER_TLS_CERT"], env["GRPC_SERVER_TLS_KEY"] = "true", srvCert, srvKey
	env["GRPC_CLIENT_TLS_CACERT"] = ca.file
	p := startRatelimit(t, env)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	dial := func(certs []tls.Certificate) error {
		creds := credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "sluice-auth"})
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlRequest("basic", [][][2]string{{{"key1", "x"}}}, 1))
		return err
	}
	if err := dial(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial([]tls.Certificate{pair}); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
}
