// Tests of a Redis that answers and refuses (at maxmemory, a replica) and
// of connection settings Redis refuses at start, through real sluice
// serve processes and real redis-servers.

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Settings Redis refuses when serve connects stop serve with exit status
// 2 and Redis's error; nothing listens. Only an unreachable Redis starts
// degraded.
func TestServeRedisRefusedSettingsExit2(t *testing.T) {
	r := startRedis(t, "--requirepass", "pw")
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	for _, tc := range []struct{ store, want string }{
		{"redis://:pw@" + r.Addr + "/16", "DB index is out of range"},
		{"redis://:pw@" + r.Addr + "/-1", "database number -1: must be 0 or more"},
		{"redis://:pw@" + r.Addr + "/99999999999", "out of range"},
		{"redis://:wrong@" + r.Addr, "WRONGPASS"},
		{"redis://" + r.Addr, "NOAUTH"},
		{"redis://" + web.Listener.Addr().String(), "unknown message type"}, // not Redis: an HTTP server
	} {
		// On a held --http port, a serve that got past the store would fail
		// with "address already in use" (exit 1) rather than run.
		code, out := runServe(t, "--config", pol, "--http", heldPort(t), "--store", tc.store)
		if code != 2 || !strings.Contains(out, tc.want) || strings.Contains(out, "sluice serving") || strings.Contains(out, ":wrong@") {
			t.Errorf("--store %s: exit %d, want 2 with %q:\n%s", tc.store, code, tc.want, out)
		}
	}
	// The right password and database: it serves.
	p := serve(t, "--config", pol, "--store", "redis://:pw@"+r.Addr+"/15")
	if code, body := call(t, p, "GET", "/readyz", ""); code != 200 || !strings.Contains(body, `"store":"reachable"`) {
		t.Fatalf("readyz %d %s", code, body)
	}
	// Nothing listening: degraded, serving.
	p = serve(t, "--config", pol, "--store", "redis://"+closedPort(t), "--store-timeout", "200ms")
	p.waitLog(t, "store unreachable")
}

// checks sends n checks for tenant and counts the answers by status.
func checks(t *testing.T, p *proc, tenant string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"`+tenant+`"}}`)
		got[code]++
		if code == 503 && !strings.Contains(body, `"store_full"`) {
			t.Fatalf("503 %s", body)
		}
	}
	return got
}

// The case: Redis at maxmemory (noeviction) answers OOM, and under
// the default fail_open a tenant with capacity 100 got 150 of 150. Now a
// tenant whose key exists is decided exactly (99 left of 100: 99 of 150
// admitted), a new tenant is refused (503 store_full, none admitted),
// /readyz says the store refuses and why, and the metric counts class oom.
func TestServeRedisOOMDecidesNoAdmissionWithoutDecision(t *testing.T) {
	r := startRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 100\n    refill_per_second: 0.001\n")
	p := serve(t, "--config", pol, "--store", "redis://"+r.Addr) // --on-store-error fail_open, the default
	if code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"acme"}}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	fillToOOM(t, r.Addr)
	if got := checks(t, p, "acme", 150); got[200] != 99 || got[429] != 51 {
		t.Fatalf("existing tenant at OOM: %v, want 99 admitted and 51 refused", got)
	}
	if got := checks(t, p, "newco", 150); got[200] != 0 || got[503] != 150 {
		t.Fatalf("new tenant at OOM: %v, want 150 answered 503 store_full", got)
	}
	// A request_id's answer is a new key: such a check is not decided.
	if code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"acme"},"request_id":"r-1"}`); code != 503 || !strings.Contains(body, "OOM") {
		t.Fatalf("check with a request_id at OOM: %d %s", code, body)
	}
	code, body := call(t, p, "GET", "/readyz", "")
	if code != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, `"store":"refusing"`) ||
		!strings.Contains(body, `"store_error_class":"oom"`) || !strings.Contains(body, "OOM command not allowed") {
		t.Fatalf("readyz at OOM: %d %s", code, body)
	}
	_, metrics := call(t, p, "GET", "/metrics", "")
	m := regexp.MustCompile(`sluice_redis_errors_total\{class="oom"\} (\d+)`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatal("no sluice_redis_errors_total{class=\"oom\"}")
	}
	if n, _ := strconv.Atoi(m[1]); n < 150 {
		t.Fatalf("oom errors counted %d, want at least 150", n)
	}
	if !strings.Contains(metrics, `sluice_redis_errors_total{class="unreachable"} 0`) || !strings.Contains(metrics, "sluice_store_degraded 0") {
		t.Fatal("OOM counted as unreachable, or degraded")
	}
	// Memory freed: new tenants are decided again, and /readyz is ready.
	if _, err := redistest.Do(r.Addr, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if got := checks(t, p, "newco", 1); got[200] != 1 {
		t.Fatalf("new tenant after OOM: %v", got)
	}
	if code, body := call(t, p, "GET", "/readyz", ""); code != 200 || !strings.Contains(body, `"status":"ready"`) {
		t.Fatalf("readyz after OOM: %d %s", code, body)
	}
}

// A Redis that comes back at maxmemory after an outage is reachable: the
// instance leaves degraded mode (fail_open stops admitting for it) rather
// than staying degraded on the refusals. Restarted empty, it has no
// function library either, and loads none at maxmemory: every check
// answers 503 with the OOM, none is admitted.
func TestServeRedisBackAtOOMIsNotAnOutage(t *testing.T) {
	r := startRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	r.Kill()
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 100\n    refill_per_second: 0.001\n")
	p := serve(t, "--config", pol, "--store", "redis://"+r.Addr, "--store-timeout", "200ms")
	p.waitLog(t, "store unreachable")
	if got := checks(t, p, "down", 3); got[200] != 3 {
		t.Fatalf("fail_open with Redis down: %v", got)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	fillToOOM(t, r.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := call(t, p, "GET", "/readyz", "")
		if code == 200 && strings.Contains(body, `"store":"refusing"`) && strings.Contains(body, `"store_error_class":"oom"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz never said the store refuses: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 150 {
		code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"newco"}}`)
		if code != 503 || !strings.Contains(body, "OOM command not allowed") {
			t.Fatalf("check %d, Redis back at OOM: %d %s", i, code, body)
		}
	}
}

// A replica refuses every write (READONLY): under fail_open nothing is
// admitted without a decision (503 store_error), and /readyz answers 503
// store_refusing with the reason.
func TestServeRedisReplicaRefuses(t *testing.T) {
	master, replica := startRedis(t), startRedis(t)
	host, port, _ := strings.Cut(master.Addr, ":")
	if _, err := redistest.Do(replica.Addr, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--store", "redis://"+replica.Addr)
	for i := range 5 {
		code, body := call(t, p, "POST", "/v1/check", `{"descriptors":{"tenant":"a"}}`)
		if code != 503 || !strings.Contains(body, `"store_error"`) || !strings.Contains(body, "READONLY") {
			t.Fatalf("check %d on a replica: %d %s", i, code, body)
		}
	}
	code, body := call(t, p, "GET", "/readyz", "")
	if code != 503 || !strings.Contains(body, `"code":"store_refusing"`) || !strings.Contains(body, `"store_error_class":"readonly"`) {
		t.Fatalf("readyz on a replica: %d %s", code, body)
	}
}

// fillToOOM writes junk keys until Redis answers OOM (it runs under
// maxmemory-policy noeviction), then lowers maxmemory by 256 KB below
// what is used: a refused write's query buffer counts until its
// connection closes, so Redis would otherwise sit at the boundary.
func fillToOOM(t *testing.T, addr string) {
	t.Helper()
	junk := strings.Repeat("x", 64<<10)
	for i := range 10000 {
		_, err := redistest.Do(addr, "SET", fmt.Sprintf("junk:%d", i), junk)
		if err == nil {
			continue
		}
		if !strings.HasPrefix(err.Error(), "OOM") {
			t.Fatal(err)
		}
		info, err := redistest.Bulk(addr, "INFO", "memory")
		if err != nil {
			t.Fatal(err)
		}
		used, err := strconv.ParseInt(regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(info)[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := redistest.Do(addr, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used-256<<10, 10)); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("Redis never reached maxmemory")
}
