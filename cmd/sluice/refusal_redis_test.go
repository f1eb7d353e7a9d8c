// The refusal cache (--refusal-cache) through sluice serve on a real Redis:
// repeats of a refused request cost Redis no command, and answer as Redis
// did, over HTTP, forward-auth and gRPC.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// redisCommands is the number of decision scripts Redis has run (INFO
// commandstats' FCALL calls: the store decides each request with one, and
// nothing else sluice does calls one; the overrides' poll, the probes and
// the receipt records run other commands).
func redisCommands(t *testing.T, addr string) int64 {
	t.Helper()
	info := redisInfo(t, addr, "commandstats")
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
			return n
		}
	}
	return 0
}

// redisInfo is INFO section's text.
func redisInfo(t *testing.T, addr, section string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n", len(section), section)
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		t.Fatalf("INFO %s: %q %v", section, head, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(head[1:]))
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkAnswer posts body to /v1/check and returns the status, headers and
// the JSON body.
func checkAnswer(t *testing.T, p *proc, body string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := http.Post(p.addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return resp.StatusCode, resp.Header, m
}

// countdown takes the fields that count down out of a /v1/check answer
// (retry_after_ms, the limits' retry_after_ms and reset_after_ms) and the
// headers' wait (RateLimit's t, Retry-After), and returns them.
func countdown(m map[string]any, h http.Header) []int64 {
	var out []int64
	out = append(out, int64(m["retry_after_ms"].(float64)))
	delete(m, "retry_after_ms")
	for _, l := range m["limits"].([]any) {
		lm := l.(map[string]any)
		out = append(out, int64(lm["retry_after_ms"].(float64)), int64(lm["reset_after_ms"].(float64)))
		delete(lm, "retry_after_ms")
		delete(lm, "reset_after_ms")
	}
	ra, _ := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	rl := h.Get("RateLimit")
	tt, _ := strconv.ParseInt(rl[strings.LastIndex(rl, ";t=")+3:], 10, 64)
	h.Del("Retry-After")
	h.Set("RateLimit", rl[:strings.LastIndex(rl, ";t=")])
	h.Del("Date")
	return append(out, ra*1000, tt*1000)
}

// Repeats of a refused request are answered without a Redis command, with
// the same status, headers and body as Redis's answer (another instance's,
// without the cache) but for the waits, which count down;
// sluice_refusal_cache_hits_total counts them by limit.
// A settle below the estimate returns tokens through the cache: the next
// request is Redis's again (and admitted). With --refusal-cache 0 every
// refusal runs the script.
func TestServeRefusalCacheRedis(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 5\n    refill_per_second: 0.05\n")
	p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr)
	// Another instance on the same keys, without the cache: Redis's answers.
	plain := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--refusal-cache", "0")
	body := `{"descriptors": {"tenant": "acme"}, "cost": 3}`
	code, _, first := checkAnswer(t, p, body)
	if code != 200 {
		t.Fatalf("first check: %d", code)
	}
	lease, _ := first["lease"].(string)
	start := time.Now()
	code, h0, refused := checkAnswer(t, plain, body)
	if code != 429 {
		t.Fatalf("Redis's refusal: %d %v", code, refused)
	}
	w0 := countdown(refused, h0)
	cmds := redisCommands(t, srv.Addr)
	// (the first answer from the cache: the refusal that the admission,
	// leaving 2 of 3, implies for the next request of 3)
	const n = 50
	for i := range n {
		code, h, m := checkAnswer(t, p, body)
		w := countdown(m, h)
		if code != 429 || fmt.Sprint(m) != fmt.Sprint(refused) || fmt.Sprint(h) != fmt.Sprint(h0) {
			t.Fatalf("rule: an answer from the cache is Redis's: repeat %d: %d %v %v, Redis's %v %v", i, code, m, h, refused, h0)
		}
		for j := range w {
			if w[j] > w0[j] || w[j] < w0[j]-time.Since(start).Milliseconds()-1000 {
				t.Fatalf("rule: the waits count down: repeat %d: %v, Redis's %v", i, w, w0)
			}
		}
	}
	if d := redisCommands(t, srv.Addr) - cmds; d != 0 {
		t.Fatalf("rule: repeats of a refusal cost Redis nothing: %d decision scripts for %d repeats", d, n)
	}
	m := metrics(t, p)
	if m[`sluice_refusal_cache_hits_total{limit="tenant_api"}`] != n || m["sluice_refusal_cache_entries"] != 1 {
		t.Fatalf("metrics: hits %v, entries %v", m[`sluice_refusal_cache_hits_total{limit="tenant_api"}`], m["sluice_refusal_cache_entries"])
	}
	// A smaller cost goes to Redis (and is admitted: 2 left).
	if code, _, _ := checkAnswer(t, p, `{"descriptors": {"tenant": "acme"}, "cost": 2}`); code != 200 {
		t.Fatalf("a smaller cost: %d", code)
	}
	// Settling the first check at 0 returns its 3 tokens: admitted again.
	if code, b := call(t, p, "POST", "/v1/settle", fmt.Sprintf(`{"lease": %q, "actual_cost": 0}`, lease)); code != 200 {
		t.Fatalf("settle: %d %s", code, b)
	}
	cmds = redisCommands(t, srv.Addr)
	if code, _, m := checkAnswer(t, p, body); code != 200 || redisCommands(t, srv.Addr) == cmds {
		t.Fatalf("rule: after a settle returned tokens the check is Redis's: %d %v", code, m)
	}

	// Off: every refusal is a script call.
	off := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--store-prefix", "off:", "--refusal-cache", "0")
	checkAnswer(t, off, body)
	checkAnswer(t, off, body)
	cmds = redisCommands(t, srv.Addr)
	for range 10 {
		checkAnswer(t, off, body)
	}
	if d := redisCommands(t, srv.Addr) - cmds; d < 10 {
		t.Fatalf("--refusal-cache 0: %d decision scripts for 10 refusals", d)
	}
	if _, ok := metrics(t, off)["sluice_refusal_cache_entries"]; ok {
		t.Fatal("--refusal-cache 0 exports the cache's metrics")
	}
}

// Forward-auth and gRPC (the policy's Envoy service, and an Envoy
// configuration) go through the same store: their repeated refusals cost
// Redis nothing either.
func TestServeRefusalCacheRedisOtherSurfaces(t *testing.T) {
	srv := startRedis(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, "request_descriptors:\n  remote_address: {from: client_ip}\nlimits:\n  - name: per_ip\n    key: \"ip:{remote_address}\"\n    capacity: 1\n    refill_per_second: 0.01\n")
	p := serve(t, "--config", pol, "--store", "redis://"+srv.Addr, "--grpc", "127.0.0.1:0")
	for i := range 2 {
		if code, _ := call(t, p, "GET", "/v1/auth", ""); code != []int{200, 429}[i] {
			t.Fatalf("forward-auth %d: %d", i, code)
		}
	}
	cmds := redisCommands(t, srv.Addr)
	for range 10 {
		if code, _ := call(t, p, "GET", "/v1/auth", ""); code != 429 {
			t.Fatalf("forward-auth repeat: %d", code)
		}
	}
	if d := redisCommands(t, srv.Addr) - cmds; d != 0 {
		t.Fatalf("forward-auth: %d decision scripts for 10 repeated refusals", d)
	}
	_, c := dialRLS(t, p)
	grpcRepeats := func(c rls.RateLimitServiceClient, ip string) {
		t.Helper()
		req := ipRequest(ip)
		for i := range 2 {
			if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT}[i] {
				t.Fatalf("gRPC call %d: %v %v", i, r, err)
			}
		}
		cmds := redisCommands(t, srv.Addr)
		for range 10 {
			if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("gRPC repeat: %v %v", r, err)
			}
		}
		if d := redisCommands(t, srv.Addr) - cmds; d != 0 {
			t.Fatalf("gRPC: %d decision scripts for 10 repeated refusals", d)
		}
	}
	grpcRepeats(c, "10.9.9.9")
	edge := filepath.Join(dir, "envoy")
	if err := os.Mkdir(edge, 0o755); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, filepath.Join(edge, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_ip, unit: hour, requests_per_unit: 1}\n")
	e := serve(t, "--envoy-config", edge, "--grpc", "127.0.0.1:0", "--store", "redis://"+srv.Addr, "--store-prefix", "envoy:")
	_, ec := dialRLS(t, e)
	grpcRepeats(ec, "10.8.8.8")
	if m := metrics(t, e); m[`sluice_refusal_cache_hits_total{limit="edge"}`] != 11 {
		t.Fatalf("Envoy mode's hits by limit (its domain): %v", m)
	}
}
