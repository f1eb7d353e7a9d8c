package main

// Forward-auth's path limits through the real proxies (the recipes of
// docs/proxies.md): no spelling of a limited path escapes its limit; and
// X-Forwarded-For hops written with a port.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// pathsPolicy limits /export to one request (whoever asks), and nothing
// else.
const pathsPolicy = `request_descriptors:
  route: {from: path, prefixes: [/export]}
limits:
  - name: exports
    key: "route:{route}"
    when: {route: /export}
    capacity: 1
    refill_per_second: 0.001
`

// pathTricks are spellings of /export (or of a path servers disagree on)
// that must not reach the upstream once /export has spent its limit: the
// issue's three, escaped characters and dots, repeated slashes, ";"
// parameters (servlet containers serve /export for /export;x), encoded
// slashes and backslashes next to dot segments.
var pathTricks = []string{
	"/%65xport", "/a/%2e%2e/export", "/export%3bx", // the trial's three
	"/export", "/%65%78port/x", "/a/%2E%2E/export", "/a/.%2e/export", "/%2e/export", "//export", "/x/../export",
	"/./export", "/export/", "/export;x", "/export;jsessionid=1/x", "/export%3Bx/y", "/export/;x",
	"/a/..;/export", "/a/b/%2e%2e/%2e%2e/export", "/export%2Fx", "/a%2F..%2Fexport", "/a%2f..%2fexport",
	"/export/x%2F..%2F..%2Fy", "/a%5C..%5Cexport", `/a\..\export`, "/a//../export",
}

// pathControls are paths outside /export: they pass.
var pathControls = []string{"/other", "/exportx", "/%65xportx", "/x/export", "/export%2e", "/a/%2e%2e%2e/export"}

// pathsThroughProxy starts a sluice serve with pathsPolicy, an upstream
// recording the paths it serves, and the proxy (start: its base URL and
// logs, listening on port, asking sluice at sluiceAddr, proxying to app),
// and checks that once /export is spent no pathTricks spelling is
// answered 200 or reaches the upstream, while pathControls pass.
func pathsThroughProxy(t *testing.T, start func(t *testing.T, sluiceAddr, app string, port int) (base string, logs func() string)) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RequestURI())
		mu.Unlock()
		fmt.Fprintln(w, "upstream", r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, pathsPolicy)
	p := serve(t, "--config", pol)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base, logs := start(t, strings.TrimPrefix(p.addr, "http://"), upstream.URL, port)
	addr := strings.TrimPrefix(base, "http://")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _, err := rawRequest(addr, "/warmup"); err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not start: %s", logs())
		}
	}
	hits := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	if code, _, err := rawRequest(addr, "/export"); err != nil || code != 200 {
		t.Fatalf("/export, first: %d %v", code, err)
	}
	before := hits()
	codes := map[int][]string{}
	for _, uri := range pathTricks {
		code, hdr, err := rawRequest(addr, uri)
		if err != nil {
			t.Fatalf("GET %s: %v", uri, err)
		}
		codes[code] = append(codes[code], uri)
		switch {
		case code == 200 || hits() != before:
			mu.Lock()
			t.Errorf("rule: %s must not pass once /export is spent: %d (upstream saw %q)", uri, code, seen[before:])
			before = len(seen)
			mu.Unlock()
		case code == 429 && !strings.Contains(hdr.Get("RateLimit"), `"exports"`):
			t.Errorf("%s: a 429 not from the exports limit: %v", uri, hdr)
		}
	}
	t.Logf("answers to the spellings of /export: %v", codes)
	for _, uri := range pathControls {
		if code, _, err := rawRequest(addr, uri); err != nil || code != 200 {
			t.Errorf("%s is outside /export: %d %v", uri, code, err)
		}
	}
	if t.Failed() {
		t.Logf("proxy logs: %s", logs())
	}
}

// rawRequest sends GET uri as it is (no client-side cleaning or escaping)
// to addr and returns the answer's status and headers.
func rawRequest(addr, uri string) (int, http.Header, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", uri, addr)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header, nil
}

// Through docs/proxies.md's nginx recipe, no spelling of /export escapes
// its limit.
func TestForwardAuthNginxPaths(t *testing.T) {
	nginx := nginxBinary(t)
	pathsThroughProxy(t, func(t *testing.T, sluiceAddr, app string, port int) (string, func() string) {
		return runNginx(t, nginx, nginxRecipe(t, sluiceAddr, strings.TrimPrefix(app, "http://"), port), port)
	})
}

// Through docs/proxies.md's Caddy recipe, no spelling of /export escapes
// its limit.
func TestForwardAuthCaddyPaths(t *testing.T) {
	caddy := caddyBinary(t)
	pathsThroughProxy(t, func(t *testing.T, sluiceAddr, app string, port int) (string, func() string) {
		conf := replaceAll(t, "Caddyfile", recipe(t, "caddyfile"), "forward_auth 127.0.0.1:8080", "forward_auth "+sluiceAddr)
		return runCaddy(t, caddy, conf, port, app)
	})
}

// An X-Forwarded-For hop written as ip:port or [v6]:port is read as its
// address: it spends that address's bucket (authPolicy's per_ip, capacity
// 5), whichever form each request uses.
func TestForwardAuthForwardedForPorts(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, authPolicy)
	p := serve(t, "--config", pol)
	for _, forms := range [][]string{
		{"198.51.100.7:4711", "198.51.100.7:1", "198.51.100.7", " 198.51.100.7:80 , 127.0.0.9:5", "198.51.100.7:2"},
		{"[2001:db8::7]:4711", "[2001:db8::7]", "2001:db8::7", "[2001:db8::7]:1, 127.0.0.9:2", "[2001:db8::7]:3"},
	} {
		for i, xff := range forms {
			res := getWith(t, p.addr+"/v1/auth", "X-Original-URI", "/api", "X-Forwarded-For", xff)
			if res.StatusCode != 200 {
				t.Fatalf("%q (request %d of the bucket's 5): %d", xff, i+1, res.StatusCode)
			}
		}
		res := getWith(t, p.addr+"/v1/auth", "X-Original-URI", "/api", "X-Forwarded-For", forms[0])
		if res.StatusCode != 429 || !strings.Contains(res.Header.Get("RateLimit"), `"per_ip";r=0`) {
			t.Fatalf("rule: %q's five forms spent one bucket: the sixth is refused: %d %v", forms[0], res.StatusCode, res.Header)
		}
	}
	if res := getWith(t, p.addr+"/v1/auth", "X-Original-URI", "/api", "X-Forwarded-For", "198.51.100.8:4711"); res.StatusCode != 200 {
		t.Fatalf("another address is another bucket: %d", res.StatusCode)
	}
}
