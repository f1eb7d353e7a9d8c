// Black-box tests of how overrides reach every instance on Redis beyond
// the announcements: the poll when an instance cannot subscribe or its
// subscription is killed, and the Redis calls of idle instances.

package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// waitListed waits until p lists want, failing after within.
func waitListed(t *testing.T, p *proc, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := listed(t, p)
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("after %v lists %q, want %q", time.Since(start), got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// B may not subscribe (an ACL user without SUBSCRIBE): it never hears
// the announcements and reads A's changes at its poll, within a second
// and one call; B logs why. An instance whose subscription is killed
// (CLIENT KILL TYPE pubsub) subscribes again and still gets the next
// change within 200 ms.
func TestServeRedisOverridesFallback(t *testing.T) {
	srv := startRedis(t)
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "deaf", "on", ">pw", "~*", "&*", "+@all", "-subscribe"); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	a := serve(t, "--config", pol, "--store", "redis://"+srv.Addr)
	b := serve(t, "--config", pol, "--store", "redis://deaf:pw@"+srv.Addr)
	b.waitLog(t, "overrides announcements not received")
	var worst time.Duration
	for i := range 5 {
		tenant := fmt.Sprintf("t%d", i)
		if code, body := call(t, a, "PUT", "/v1/overrides", `{"name": "tenant_api", "match": {"tenant": "`+tenant+`"}, "capacity": 5}`); code != 200 {
			t.Fatalf("PUT on A: %d %s", code, body)
		}
		want := strings.Join(append(tenants(i), "vip=policy"), " ")
		took := waitListed(t, b, want, 1300*time.Millisecond) // (the period, then one call; the rest for a loaded machine)
		worst = max(worst, took)
		time.Sleep(time.Duration(137*i) * time.Millisecond) // (at another point of B's period)
	}
	t.Logf("B, polling: the slowest of 5 changes listed %v after the set on A", worst.Round(time.Millisecond))
	if !b.logged("NOPERM") {
		t.Fatalf("B does not say why it cannot subscribe: %s", b.logs)
	}

	// A's subscription killed, again and again: each next change still
	// arrives announced.
	worst = 0
	for i := range 3 {
		if _, err := redistest.Do(srv.Addr, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if code, body := call(t, b, "DELETE", "/v1/overrides", fmt.Sprintf(`{"name": "tenant_api", "match": {"tenant": "t%d"}}`, i)); code != 200 {
			t.Fatalf("DELETE on B: %d %s", code, body)
		}
		want := strings.Join(append(tenants(4)[i+1:], "vip=policy"), " ")
		worst = max(worst, waitListed(t, a, want, 200*time.Millisecond))
	}
	t.Logf("A, its subscription killed before each change: the slowest of 3 listed %v after the delete on B", worst.Round(time.Millisecond))
}

// tenants are "t0=api" ... "tN=api".
func tenants(n int) []string {
	var out []string
	for i := 0; i <= n; i++ {
		out = append(out, fmt.Sprintf("t%d=api", i))
	}
	return out
}

// Two idle instances on one Redis make one overrides call a second each
// (the poll; INFO commandstats over 10 s), and decisions under an
// override none.
func TestServeRedisOverridesIdleCalls(t *testing.T) {
	srv := startRedis(t)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, ovServePolicy)
	store := "redis://" + srv.Addr
	a := serve(t, "--config", pol, "--store", store)
	b := serve(t, "--config", pol, "--store", store)
	if code, body := putAcme(t, a, ""); code != 200 {
		t.Fatalf("PUT on A: %d %s", code, body)
	}
	waitListed(t, b, "acme=api vip=policy", time.Second)
	time.Sleep(time.Second)
	if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	const idle = 10 * time.Second
	time.Sleep(idle)
	calls, err := redistest.CommandCalls(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	delete(calls, "info")
	var all []string
	for c, n := range calls {
		all = append(all, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(all)
	per := float64(calls["evalsha"]+calls["eval"]) / 2 / idle.Seconds()
	t.Logf("2 idle instances over %v: %s; overrides scripts %.2f a second per instance", idle, strings.Join(all, ", "), per)
	if per > 1.1 { // (one a second; a period's phase may add one)
		t.Fatalf("%.2f overrides calls a second per idle instance, want at most 1", per)
	}

	// Decisions under an override add no call but their own script.
	if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	const checks = 200
	start := time.Now()
	for range checks {
		if code, body := call(t, b, "POST", "/v1/check", `{"descriptors": {"tenant": "acme"}}`); code != 200 {
			t.Fatalf("check: %d %s", code, body)
		}
	}
	took := time.Since(start)
	if calls, err = redistest.CommandCalls(srv.Addr); err != nil {
		t.Fatal(err)
	}
	// (Each overrides read, and nothing else, runs one HMGET: of the
	// store's meta hash; each overrides write one PUBLISH.)
	polls := 2 * (int64(took/time.Second) + 2) // (a period's phase, or a reconnection's read, may add one each)
	if calls["hmget"] > polls || calls["publish"] > 0 {
		t.Fatalf("%d checks under an override in %v made %v, want at most %d overrides reads (the polls)", checks, took, calls, polls)
	}
	t.Logf("%d checks under an override in %v: %v", checks, took.Round(time.Millisecond), calls)
}
