package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

const authPolicy = `request_descriptors:
  client_ip: {from: client_ip, trusted_proxies: [127.0.0.0/8]}
  route:     {from: path, prefixes: [/export]}
limits:
  - name: per_ip
    key: "ip:{client_ip}"
    capacity: 5
    refill_per_second: 0.01
  - name: exports
    key: "ip:{client_ip}:route:{route}"
    when: {route: /export}
    capacity: 1
    refill_per_second: 0.01
`

// /v1/auth directly: descriptors from the forwarded request, 200 with the
// RateLimit fields, 429 (or 403 with ?deny=403) with Retry-After; a
// direct, untrusted client cannot pick its address with X-Forwarded-For.
func TestForwardAuth(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, authPolicy)
	p := serve(t, "--config", pol)
	get := func(uri string, hdr ...string) *http.Response { t.Helper(); return getWith(t, p.addr+uri, hdr...) }
	res := get("/v1/auth", "X-Original-URI", "/export/all?x=1", "X-Forwarded-For", "127.0.0.5")
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("RateLimit"), `"exports";r=0`) {
		t.Fatalf("rule: admitted: 200 with the RateLimit fields: %d %v", res.StatusCode, res.Header)
	}
	res = get("/v1/auth", "X-Original-URI", "/export/again", "X-Forwarded-For", "127.0.0.5")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("rule: refused: 429 with Retry-After: %d %v", res.StatusCode, res.Header)
	}
	if res := get("/v1/auth?deny=403", "X-Original-URI", "/export/again", "X-Forwarded-For", "127.0.0.5"); res.StatusCode != 403 {
		t.Fatalf("?deny=403: %d", res.StatusCode)
	}
	if res := get("/v1/auth?deny=500"); res.StatusCode != 400 {
		t.Fatalf("a bad deny: %d", res.StatusCode)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writePolicy(t, bad, authPolicy+"  - {name: slots, key: x, max_in_flight: 2, lease_ttl: 30s}\n")
	if code, _, errOut := runCmd(t, "", "check", bad); code != 1 || !strings.Contains(errOut, "no done signal") {
		t.Fatalf("rule: max_in_flight with request_descriptors is refused at load, saying why: %d %s", code, errOut)
	}
}

// The nginx recipe of docs/proxies.md, tested against Debian's nginx on
// loopback in front of a real upstream.
func TestForwardAuthNginx(t *testing.T) {
	nginx := nginxBinary(t)
	upstream, hits, p, port := proxyRig(t)
	dir := t.TempDir()
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fcgi; uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, nginxRecipe(t, strings.TrimPrefix(p.addr, "http://"), strings.TrimPrefix(upstream.URL, "http://"), port))
	os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644)
	cmd := exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	out, _ := os.Create(filepath.Join(dir, "out.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopGracefully(cmd) // (SIGKILL would leave nginx's workers running, holding the port)
	burstThroughProxy(t, fmt.Sprintf("http://127.0.0.1:%d", port), hits, func() string {
		log, _ := os.ReadFile(filepath.Join(dir, "out.log"))
		elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return string(log) + string(elog)
	})
}

// recipe is docs/proxies.md's first block of lang.
func recipe(t *testing.T, lang string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "proxies.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "```"+lang+"\n")
	if start < 0 {
		t.Fatalf("docs/proxies.md has no %s block", lang)
	}
	block := s[start+len("```"+lang+"\n"):]
	return block[:strings.Index(block, "```")]
}

// proxyRig is what a proxy test puts around the proxy: an upstream that
// counts its hits (and echoes the path), a sluice serve with authPolicy,
// and a free port for the proxy to listen on; serveArgs are more flags of
// sluice serve.
func proxyRig(t *testing.T, serveArgs ...string) (upstream *httptest.Server, hits *atomic.Int64, p *proc, port int) {
	t.Helper()
	hits = new(atomic.Int64)
	upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintln(w, "upstream", r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, authPolicy)
	p = serve(t, append([]string{"--config", pol}, serveArgs...)...)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return upstream, hits, p, port
}

// nginxRecipe is docs/proxies.md's nginx configuration (the upstream and
// server blocks, as written), pointed at sluice at addr and the upstream
// at app, listening on port.
func nginxRecipe(t *testing.T, addr, app string, port int) string {
	t.Helper()
	block := recipe(t, "nginx")
	for old, new := range map[string]string{
		"http://127.0.0.1:8080/": "http://" + addr + "/",
		"server 127.0.0.1:9000;": "server " + app + ";",
		"listen 80;":             fmt.Sprintf("listen 127.0.0.1:%d;", port),
	} {
		if !strings.Contains(block, old) {
			t.Fatalf("docs/proxies.md's nginx recipe has no %q", old)
		}
		block = strings.ReplaceAll(block, old, new)
	}
	return block
}

// burstThroughProxy sends 8 requests to base, each with another spoofed
// X-Forwarded-For and a spoofed X-Forwarded-Uri, after one warm-up request, and checks the forward-auth
// rules on authPolicy's per_ip limit (capacity 5): the warm-up and 4 more
// admitted and reaching the upstream (hits), then 429 with Retry-After and
// the RateLimit fields.
func burstThroughProxy(t *testing.T, base string, hits *atomic.Int64, logs func() string) {
	t.Helper()
	for i := 0; ; i++ {
		if res, err := http.Get(base + "/warmup-not-limited-by-exports"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if i > 200 {
			t.Fatalf("the proxy did not start: %s", logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	admitted, refused := 0, 0
	var last *http.Response
	for i := range 8 {
		req, _ := http.NewRequest("GET", base+"/api", nil)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i)) // spoofing attempts: the address,
		req.Header.Set("X-Forwarded-Uri", "/export/spoofed")              // and the path (into the exports limit, capacity 1)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		switch res.StatusCode {
		case 200:
			admitted++
		case 429:
			refused++
			last = res
		default:
			t.Fatalf("status %d from the proxy", res.StatusCode)
		}
	}
	if admitted != 4 || refused != 4 {
		t.Fatalf("rule: exactly the burst is admitted, the client IP and path the real ones (spoofed X-Forwarded-For and X-Forwarded-Uri ignored): admitted %d, refused %d", admitted, refused)
	}
	if got := hits.Load(); got != 5 {
		t.Fatalf("rule: admitted requests reach the upstream, refused ones do not: %d hits", got)
	}
	if last.Header.Get("Retry-After") == "" || !strings.Contains(last.Header.Get("RateLimit"), `"per_ip";r=0`) {
		t.Fatalf("rule: the proxy answers 429 with Retry-After and the RateLimit fields: %v", last.Header)
	}
}

// The Caddy recipe of docs/proxies.md, against Caddy built from its Go
// module (scripts/test.sh builds tools/caddy and sets SLUICE_CADDY).
func TestForwardAuthCaddy(t *testing.T) {
	caddy := caddyBinary(t)
	upstream, hits, p, port := proxyRig(t)
	conf := recipe(t, "caddyfile")
	conf = strings.ReplaceAll(conf, "http://127.0.0.1:8000", fmt.Sprintf("http://127.0.0.1:%d", port))
	conf = strings.ReplaceAll(conf, "forward_auth 127.0.0.1:8080", "forward_auth "+strings.TrimPrefix(p.addr, "http://"))
	conf = strings.ReplaceAll(conf, "reverse_proxy upstream:9000", "reverse_proxy "+strings.TrimPrefix(upstream.URL, "http://"))
	dir := t.TempDir()
	file := filepath.Join(dir, "Caddyfile")
	os.WriteFile(file, []byte(conf), 0o644)
	cmd := exec.Command(caddy, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out, _ := os.Create(filepath.Join(dir, "out.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopGracefully(cmd)
	burstThroughProxy(t, fmt.Sprintf("http://127.0.0.1:%d", port), hits, func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "out.log"))
		return string(b)
	})
}

// A forwarded URI is read as a request line, its path as servers read it
// (policy.CleanPath): "//export/x" and "/%65xport" are under /export, an
// encoded slash next to dot segments (ambiguous), a malformed URI or an
// oversized descriptor is a 400.
func TestForwardAuthURIs(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "request_descriptors:\n  route: {from: path, prefixes: [/export]}\n  key: {from: header, name: X-Key}\nlimits:\n  - {name: exports, key: \"r:{route}\", when: {route: /export}, capacity: 1, refill_per_second: 0.01}\n")
	p := serve(t, "--config", pol)
	status := func(uri string, hdr ...string) int {
		t.Helper()
		return getWith(t, p.addr+"/v1/auth", append([]string{"X-Forwarded-Uri", uri}, hdr...)...).StatusCode
	}
	if a, b, c := status("/export/a"), status("//export/b"), status("/x/../export/c"); a != 200 || b != 429 || c != 429 {
		t.Fatalf("rule: //export/ and /x/../export/ are under /export (1 admitted): %d %d %d", a, b, c)
	}
	if s := status("/%65xport/d"); s != 429 {
		t.Fatalf("rule: an escaped letter is the letter: /%%65xport is under /export: %d", s)
	}
	if s := status("/a%2F..%2F..%2Fexport"); s != 400 {
		t.Fatalf("rule: an encoded slash next to dot segments is a path servers disagree on: 400: %d", s)
	}
	if s := status("/a%2f%2e%2E%2F..%2fexport?x=1"); s != 400 {
		t.Fatalf("rule: ... its escapes in either case: 400: %d", s)
	}
	if s := status("%zz"); s != 400 {
		t.Fatalf("rule: a malformed forwarded URI is a 400: %d", s)
	}
	if s := status("/y", "X-Key", strings.Repeat("k", 2000)); s != 400 {
		t.Fatalf("rule: descriptor values are bounded as /v1/check's: %d", s)
	}
}

// stopGracefully asks a proxy to stop (SIGTERM: nginx's master then stops
// its workers), and kills it after 5 s.
func stopGracefully(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// getWith GETs url with the header pairs hdr and returns the answer, its
// body closed.
func getWith(t *testing.T, url string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}
