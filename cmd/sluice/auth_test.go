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
	get := func(uri string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", p.addr+uri, nil)
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
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			t.Fatal("nginx is needed: apt-get install nginx (scripts/test.sh does)")
		}
		nginx = "/usr/sbin/nginx"
	}
	var hits atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintln(w, "upstream", r.URL.Path)
	}))
	defer upstream.Close()
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, authPolicy)
	p := serve(t, "--config", pol)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fcgi; uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  upstream app { server %[2]s; }
  server {
    listen 127.0.0.1:%[3]d;
    %[4]s
  }
}
`, dir, strings.TrimPrefix(upstream.URL, "http://"), port, nginxRecipe(t, strings.TrimPrefix(p.addr, "http://")))
	os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644)
	cmd := exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	out, _ := os.Create(filepath.Join(dir, "out.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if res, err := http.Get(base + "/warmup-not-limited-by-exports"); err == nil {
			res.Body.Close()
			break
		}
		if i > 100 {
			log, _ := os.ReadFile(filepath.Join(dir, "out.log"))
			elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not start: %s %s", log, elog)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The warm-up took 1 of the 5; 4 more pass, whatever X-Forwarded-For
	// the client sends (nginx sets it from the connection), then 429.
	admitted, refused := 0, 0
	var last *http.Response
	for i := range 8 {
		req, _ := http.NewRequest("GET", base+"/api", nil)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i)) // a spoofing attempt
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
			t.Fatalf("status %d from nginx", res.StatusCode)
		}
	}
	if admitted != 4 || refused != 4 {
		t.Fatalf("rule: exactly the burst is admitted, the client IP the real one (spoofed X-Forwarded-For ignored): admitted %d, refused %d", admitted, refused)
	}
	if got := hits.Load(); got != 5 {
		t.Fatalf("rule: admitted requests reach the upstream, refused ones do not: %d hits", got)
	}
	if last.Header.Get("Retry-After") == "" || !strings.Contains(last.Header.Get("RateLimit"), `"per_ip";r=0`) {
		t.Fatalf("rule: nginx answers 429 with Retry-After and the RateLimit fields: %v", last.Header)
	}
}

// nginxRecipe is docs/proxies.md's nginx server block, pointed at sluice
// at addr and the upstream "app".
func nginxRecipe(t *testing.T, addr string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "proxies.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "```nginx\n")
	if start < 0 {
		t.Fatal("docs/proxies.md has no nginx block")
	}
	block := s[start+len("```nginx\n"):]
	block = block[:strings.Index(block, "```")]
	block = strings.ReplaceAll(block, "http://127.0.0.1:8080/", "http://"+addr+"/")
	return strings.ReplaceAll(block, "http://upstream;", "http://app;")
}

// --auth-listen serves /v1/auth alone on a port of its own.
func TestForwardAuthListen(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, authPolicy)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := serve(t, "--config", pol, "--auth-listen", fmt.Sprintf("127.0.0.1:%d", port))
	auth := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i, want := range []int{200, 200, 200, 200, 200, 429} {
		res, err := http.Get(auth + "/v1/auth")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("request %d on --auth-listen: %d, want %d", i, res.StatusCode, want)
		}
	}
	if res, err := http.Post(auth+"/v1/check", "application/json", strings.NewReader(`{"descriptors":{}}`)); err != nil || res.StatusCode != 404 {
		t.Fatalf("rule: --auth-listen serves /v1/auth only: %v %v", res, err)
	}
	if code, _ := call(t, p, "GET", "/v1/auth", ""); code != 429 {
		t.Fatalf("the main listener serves /v1/auth too, on the same budget: %d", code)
	}
	if code, _, errOut := runCmd(t, "", "serve", "--envoy-config", t.TempDir(), "--grpc", "127.0.0.1:0", "--auth-listen", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "--auth-listen") {
		t.Fatalf("--auth-listen with --envoy-config: %d %s", code, errOut)
	}
}
