// envoyproxy/ratelimit's integration scenarios against a real `sluice ratelimit`, on real Redis.

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// rlProc is a running `sluice ratelimit`.
type rlProc struct {
	cmd                  *exec.Cmd
	http, debug, metrics string // base URLs
	grpc                 string // host:port
	mu                   sync.Mutex
	logs                 []string
	done                 chan error
}

func (p *rlProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// rlPort is a loopback port free a moment ago.
func rlPort(t *testing.T) string {
	t.Helper()
	n, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(n)
}

// rlEnv is the reference integration test's environment (its
// defaultSettings and makeSimpleRedisSettings): the runtime layout
// RUNTIME_ROOT/ratelimit/config, statsd off, Prometheus on, Redis over
// TCP at redisAddr ("" : no Redis), ports free on loopback.
func rlEnv(t *testing.T, root, redisAddr string) map[string]string {
	env := map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "config",
		"USE_STATSD": "false", "USE_PROMETHEUS": "true", "LOG_LEVEL": "debug", "LOG_FORMAT": "json",
		"HOST": "127.0.0.1", "GRPC_HOST": "127.0.0.1", "DEBUG_HOST": "127.0.0.1",
		"PORT": rlPort(t), "GRPC_PORT": rlPort(t), "DEBUG_PORT": rlPort(t),
		"PROMETHEUS_ADDR": "127.0.0.1:" + rlPort(t),
	}
	if redisAddr != "" {
		env["BACKEND_TYPE"], env["REDIS_SOCKET_TYPE"], env["REDIS_URL"] = "redis", "tcp", redisAddr
		env["REDIS_TIMEOUT"] = "5s" // (the reference's is 10 s; sluice's 250 ms could fail over on a loaded machine)
	}
	return env
}

// rlCommand is `sluice ratelimit` with env and nothing else of the
// reference's (or serve's) variables from this process's environment.
func rlCommand(ctx context.Context, env map[string]string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binary, "ratelimit")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "HOME" || k == "TMPDIR" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// startRatelimit starts `sluice ratelimit` with env and waits for its
// /healthcheck.
func startRatelimit(t *testing.T, env map[string]string) *rlProc {
	t.Helper()
	cmd := rlCommand(context.Background(), env)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rlProc{cmd: cmd, done: make(chan error, 1),
		http: "http://127.0.0.1:" + env["PORT"], debug: "http://127.0.0.1:" + env["DEBUG_PORT"],
		metrics: "http://" + env["PROMETHEUS_ADDR"] + "/metrics", grpc: "127.0.0.1:" + env["GRPC_PORT"]}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs = append(p.logs, sc.Text())
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
		switch {
		case strings.Contains(p.log(), "DATA RACE"): // (a binary built with -race: $SLUICE_BIN)
			t.Errorf("sluice ratelimit raced:\n%s", p.log())
		case t.Failed():
			t.Logf("sluice ratelimit's log:\n%s", p.log())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-p.done:
			t.Fatalf("sluice ratelimit exited: %v\n%s", err, p.log())
		default:
		}
		if resp, err := http.Get(p.http + "/healthcheck"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(b) == "OK" {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice ratelimit: no healthy /healthcheck in 15 s\n%s", p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rlClient dials p's gRPC.
func rlClient(t *testing.T, p *rlProc) rls.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rls.NewRateLimitServiceClient(conn)
}

// rlRequest is the reference test's common.NewRateLimitRequest: a domain,
// descriptors of key/value entries, hits_addend.
func rlRequest(domain string, descriptors [][][2]string, hits uint32) *rls.RateLimitRequest {
	req := &rls.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descriptors {
		desc := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range d {
			desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req
}

func rlAsk(t *testing.T, c rls.RateLimitServiceClient, req *rls.RateLimitRequest) *rls.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit %v: %v", req, err)
	}
	return resp
}

// status is what the reference test compares of a descriptor status
// (newDescriptorStatus without the duration): the code, the current
// limit (rpu 0 and unit UNKNOWN: none) and limit_remaining.
type rlStatus struct {
	code      rls.RateLimitResponse_Code
	rpu       uint32
	unit      rls.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

func (s rlStatus) String() string {
	return fmt.Sprintf("{%v %d/%v remaining %d}", s.code, s.rpu, s.unit, s.remaining)
}

func rlStatuses(r *rls.RateLimitResponse) []rlStatus {
	var out []rlStatus
	for _, st := range r.GetStatuses() {
		out = append(out, rlStatus{st.GetCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining()})
	}
	return out
}

// expect checks a response's overall code and statuses.
func rlExpect(t *testing.T, what string, r *rls.RateLimitResponse, overall rls.RateLimitResponse_Code, want ...rlStatus) {
	t.Helper()
	got := rlStatuses(r)
	if r.GetOverallCode() != overall || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %v %v, want %v %v", what, r.GetOverallCode(), got, overall, want)
	}
}

const (
	ok   = rls.RateLimitResponse_OK
	over = rls.RateLimitResponse_OVER_LIMIT
	sec  = rls.RateLimitResponse_RateLimit_SECOND
	min_ = rls.RateLimitResponse_RateLimit_MINUTE
	hour = rls.RateLimitResponse_RateLimit_HOUR
)

// metric is the value of the Prometheus series name{labels} on url (0
// when absent); labels as written in the exposition, e.g.
// `domain="basic",key1="key1"`.
func rlMetric(t *testing.T, url, name, labels string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{` + regexp.QuoteMeta(labels) + `\})? ([0-9.e+-]+)$`)
	m := re.FindStringSubmatch(string(b))
	if m == nil || labels != "" && m[1] == "" {
		return 0
	}
	v, _ := strconv.ParseFloat(m[2], 64)
	return v
}

// rlMetricSum is the sum of every series of name on url.
func rlMetricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`(\{.*\})? ([0-9.e+-]+)$`).FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}

// writeRuntime writes files (path under root -> content).
func writeRuntime(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The reference's test/integration runtime files.
const (
	rtBasic = `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`
	rtAnother = `domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
`
	rtReload = `domain: reload
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: block
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`
	rtShareThreshold = `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    rate_limit:
      unit: hour
      requests_per_unit: 10
`
)

// The reference's testBasicBaseConfig on Redis (its TestBasicConfig, the
// variants StopCacheKeyIncrementWhenOverlimit — sluice never takes from a
// descriptor of a refused call —, WithLocalCache and WithCachePrefix),
// with its metrics under the names of its Prometheus mapping.
func TestRatelimitBasic(t *testing.T) {
	r := redistest.New(t)
	for _, tc := range []struct{ name, cache, prefix string }{
		{"WithoutLocalCache", "", "a:"}, {"WithLocalCache", "1000", "b:"}, {"WithCachePrefix", "", "prefix:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "runtime", "current")
			writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic, "ratelimit/config/another.yaml": rtAnother})
			env := rlEnv(t, root, r.Addr)
			env["LOCAL_CACHE_SIZE_IN_BYTES"], env["CACHE_KEY_PREFIX"] = tc.cache, tc.prefix
			p := startRatelimit(t, env)
			testRatelimitBasic(t, p)
			if tc.cache == "" && tc.prefix == "prefix:" {
				if n, err := redistest.Do(r.Addr, "KEYS", "prefix:*"); err != nil || n == "*0" { // (the reply's first line: *COUNT)
					t.Fatalf("no key under CACHE_KEY_PREFIX: %q %v", n, err)
				}
			}
			// The reference's local cache is sluice's refusal cache: the
			// repeated refusals were answered from it.
			hits := rlMetricSum(t, p.metrics, "sluice_refusal_cache_hits_total")
			if tc.cache != "" && hits == 0 || tc.cache == "" && hits != 0 {
				t.Fatalf("LOCAL_CACHE_SIZE_IN_BYTES=%q: refusal cache hits %v", tc.cache, hits)
			}
		})
	}
}

// The reference's TestBasicAuthConfig and
// TestBasicAuthConfigWithRedisCluster: REDIS_AUTH, and REDIS_TYPE=cluster
// with REDIS_URL naming the nodes.
func TestRatelimitBasicRedisAuthAndCluster(t *testing.T) {
	t.Run("WithRedisAuth", func(t *testing.T) {
		r := redistest.New(t, "--requirepass", "password123")
		root := filepath.Join(t.TempDir(), "runtime", "current")
		writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic, "ratelimit/config/another.yaml": rtAnother})
		env := rlEnv(t, root, r.Addr)
		env["REDIS_AUTH"] = "password123"
		testRatelimitBasic(t, startRatelimit(t, env))
	})
	t.Run("WithRedisCluster", func(t *testing.T) {
		cl := redistest.NewCluster(t, 3)
		root := filepath.Join(t.TempDir(), "runtime", "current")
		writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic, "ratelimit/config/another.yaml": rtAnother})
		env := rlEnv(t, root, strings.Join(cl.Addrs(), ","))
		env["REDIS_TYPE"] = "cluster"
		testRatelimitBasic(t, startRatelimit(t, env))
	})
}

func testRatelimitBasic(t *testing.T, p *rlProc) {
	c := rlClient(t, p)

	rlExpect(t, "unknown domain", rlAsk(t, c, rlRequest("foo", [][][2]string{{{"hello", "world"}}}, 1)), ok, rlStatus{code: ok})
	rlExpect(t, "basic key1", rlAsk(t, c, rlRequest("basic", [][][2]string{{{"key1", "foo"}}}, 1)), ok, rlStatus{ok, 50, sec, 49})
	if v := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_total_hits", `domain="basic",key1="key1"`); v != 1 {
		t.Fatalf("basic.key1.total_hits %v", v)
	}

	// Over a minute's limit with a random value.
	v := strconv.Itoa(rand.Int())
	for i := range 25 {
		want, rem := ok, uint32(20-(i+1))
		if i >= 20 {
			want, rem = over, 0
		}
		rlExpect(t, fmt.Sprint("key2 #", i), rlAsk(t, c, rlRequest("another", [][][2]string{{{"key2", v}}}, 1)), want, rlStatus{want, 20, min_, rem})
	}
	// (The series read once the calls are made: 20 a minute refills one
	// every 3 s, more than 25 calls and their reads may take on a loaded
	// machine.)
	lbl := `domain="another",key1="key2"`
	if h := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_total_hits", lbl); h != 25 {
		t.Fatalf("key2 total_hits %v", h)
	}
	if o := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_over_limit", lbl); o != 5 {
		t.Fatalf("key2 over_limit %v", o)
	}
	if w := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_within_limit", lbl); w != 20 {
		t.Fatalf("key2 within_limit %v", w)
	}

	// Two keys of one domain: key3 (10 an hour) refuses from the 11th;
	// the refused calls take nothing from key2.
	v = strconv.Itoa(rand.Int())
	for i := range 15 {
		want, rem1, rem2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			want, rem1, rem2 = over, 10, 0
		}
		r := rlAsk(t, c, rlRequest("another", [][][2]string{{{"key2", v}}, {{"key3", v}}}, 1))
		rlExpect(t, fmt.Sprint("key2+key3 #", i), r, want, rlStatus{ok, 20, min_, rem1}, rlStatus{want, 10, hour, rem2})
	}
	if h := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_total_hits", lbl); h != 40 {
		t.Fatalf("key2 total_hits %v", h)
	}
	if h := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_total_hits", `domain="another",key1="key3"`); h != 15 {
		t.Fatalf("key3 total_hits %v", h)
	}
	if o := rlMetric(t, p.metrics, "ratelimit_service_rate_limit_over_limit", `domain="another",key1="key3"`); o != 5 {
		t.Fatalf("key3 over_limit %v", o)
	}

	// DurationUntilReset counts down: here the time until key4's bucket
	// is full again, read again (hits_addend 0) a second later.
	r1 := rlAsk(t, c, rlRequest("another", [][][2]string{{{"key4", "durTest"}}}, 1))
	time.Sleep(1100 * time.Millisecond)
	r2 := rlAsk(t, c, &rls.RateLimitRequest{Domain: "another", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "key4", Value: "durTest"}}, HitsAddend: wrapperspb.UInt64(0)}}})
	d1, d2 := r1.Statuses[0].GetDurationUntilReset().AsDuration(), r2.Statuses[0].GetDurationUntilReset().AsDuration()
	if d1 <= 0 || d2 >= d1 {
		t.Fatalf("duration until reset %v then %v", d1, d2)
	}

	// The HTTP endpoints: /json as the reference answers it, the debug
	// port's /rlconfig.
	resp, err := http.Post(p.http+"/json", "application/json", strings.NewReader(`{"domain":"basic","descriptors":[{"entries":[{"key":"one_per_minute","value":"x"}]}]}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/json: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err = http.Post(p.http+"/json", "application/json", strings.NewReader(`{"domain":"basic","descriptors":[{"entries":[{"key":"one_per_minute","value":"x"}]}]}`)); err != nil || resp.StatusCode != 429 {
		t.Fatalf("/json over the limit: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(p.debug + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "basic.key1: unit=SECOND requests_per_unit=50, shadow_mode: false, quota_mode: false\n") {
		t.Fatalf("/rlconfig:\n%s", b)
	}
	if n := rlMetric(t, p.metrics, "ratelimit_service_total_requests", `grpc_method="ShouldRateLimit"`); n < 40 {
		t.Fatalf("total_requests %v", n)
	}
}

// waitLoads waits until ratelimit_service_config_load_success passes
// before, and returns it.
func waitLoads(t *testing.T, p *rlProc, before float64) float64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if n := rlMetric(t, p.metrics, "ratelimit_service_config_load_success", ""); n > before {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no reload within 20 s\n%s", p.log())
	return 0
}

// The reference's testConfigReload: a file copied into the config
// directory is loaded, its removal loads again; with RUNTIME_WATCH_ROOT
// false (the directory watched) and true (RUNTIME_ROOT a symbolic link
// swapped to another directory, the reference's default way).
func TestRatelimitReload(t *testing.T) {
	r := redistest.New(t)
	t.Run("WithoutWatchRoot", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "runtime", "current")
		writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic})
		env := rlEnv(t, root, r.Addr)
		env["RUNTIME_WATCH_ROOT"] = "false"
		p := startRatelimit(t, env)
		c := rlClient(t, p)
		rlExpect(t, "before", rlAsk(t, c, rlRequest("reload", [][][2]string{{{"block", "foo"}}}, 1)), ok, rlStatus{code: ok})
		before := rlMetric(t, p.metrics, "ratelimit_service_config_load_success", "")
		if before != 1 {
			t.Fatalf("config_load_success at the start: %v", before)
		}
		writeRuntime(t, root, map[string]string{"ratelimit/config/reload.yaml": rtReload})
		after := waitLoads(t, p, before)
		rlExpect(t, "key1", rlAsk(t, c, rlRequest("reload", [][][2]string{{{"key1", "foo"}}}, 1)), ok, rlStatus{ok, 50, sec, 49})
		rlExpect(t, "block", rlAsk(t, c, rlRequest("reload", [][][2]string{{{"block", "foo"}}}, 1)), over, rlStatus{over, 0, sec, 0})
		if err := os.Remove(filepath.Join(root, "ratelimit/config/reload.yaml")); err != nil {
			t.Fatal(err)
		}
		waitLoads(t, p, after)
		rlExpect(t, "removed", rlAsk(t, c, rlRequest("reload", [][][2]string{{{"block", "foo"}}}, 1)), ok, rlStatus{code: ok})
		// A bad file is refused, counted, and the configuration stays.
		writeRuntime(t, root, map[string]string{"ratelimit/config/bad.yaml": "domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
		deadline := time.Now().Add(20 * time.Second)
		for rlMetric(t, p.metrics, "ratelimit_service_config_load_error", "") < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("bad file not refused\n%s", p.log())
			}
			time.Sleep(100 * time.Millisecond)
		}
		rlExpect(t, "kept", rlAsk(t, c, rlRequest("basic", [][][2]string{{{"key1", "bar"}}}, 1)), ok, rlStatus{ok, 50, sec, 49})
	})
	t.Run("WatchRootSymlinkSwap", func(t *testing.T) {
		dir := t.TempDir()
		writeRuntime(t, dir, map[string]string{"v1/ratelimit/config/basic.yaml": rtBasic,
			"v2/ratelimit/config/basic.yaml": rtBasic, "v2/ratelimit/config/reload.yaml": rtReload})
		root := filepath.Join(dir, "current")
		if err := os.Symlink("v1", root); err != nil {
			t.Fatal(err)
		}
		p := startRatelimit(t, rlEnv(t, root, r.Addr))
		c := rlClient(t, p)
		rlExpect(t, "v1", rlAsk(t, c, rlRequest("reload", [][][2]string{{{"key1", "foo"}}}, 1)), ok, rlStatus{code: ok})
		before := rlMetric(t, p.metrics, "ratelimit_service_config_load_success", "")
		tmp := filepath.Join(dir, "current.tmp")
		if err := os.Symlink("v2", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, root); err != nil { // an atomic swap
			t.Fatal(err)
		}
		waitLoads(t, p, before)
		rlExpect(t, "v2", rlAsk(t, c, rlRequest("reload", [][][2]string{{{"key1", "foo"}}}, 1)), ok, rlStatus{ok, 50, sec, 49})
	})
}
