package main

// The Traefik recipe of docs/proxies.md, against Traefik built from its Go
// module (tools/traefik/build.sh; scripts/test.sh sets SLUICE_TRAEFIK).

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testbin"
)

// traefikBinary is $SLUICE_TRAEFIK, else traefik on the PATH.
func traefikBinary(t *testing.T) string {
	t.Helper()
	return testbin.Need(t, testbin.Traefik)
}

// docBlock is the fenced block of docs/proxies.md whose first line is
// first (a comment naming what the block is).
func docBlock(t *testing.T, first string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "proxies.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "\n"+first+"\n")
	if i < 0 || !strings.HasPrefix(s[strings.LastIndex(s[:i], "\n")+1:i], "```") {
		t.Fatalf("docs/proxies.md has no block opening with %q", first)
	}
	block := s[i+1:]
	return block[:strings.Index(block, "```")]
}

// replaceAll replaces each old of pairs by its new in s, failing the test
// when s has no old: a recipe the test cannot point at its rig is a doc
// that changed.
func replaceAll(t *testing.T, what, s string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("docs/proxies.md's %s has no %q:\n%s", what, pairs[i], s)
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	return s
}

const (
	traefikStatic  = "# traefik.yml: the static configuration"
	traefikDynamic = "# sluice.yml: the dynamic configuration (providers.file)"
	traefikMTLS    = "# sluice.yml's middleware, with a client certificate (--auth-listen-client-ca)"
)

// startTraefik runs the recipe's Traefik on port, its forwardAuth asking
// sluice at sluiceURL (http://host:port) and its service the upstream at
// app; with k, the middleware is the client-certificate one, asking
// k's --auth-listen at authAddr; edit, when given, changes the static and
// dynamic configurations last. It returns the proxy's base URL and its
// logs.
func startTraefik(t *testing.T, sluiceURL, app string, port int, k *authPKI, authAddr string, edit ...func(static, dyn string) (string, string)) (string, func() string) {
	t.Helper()
	dir := t.TempDir()
	dynFile := filepath.Join(dir, "sluice.yml")
	static := replaceAll(t, "Traefik static configuration", docBlock(t, traefikStatic),
		"127.0.0.1:8000", fmt.Sprintf("127.0.0.1:%d", port),
		"/etc/traefik/sluice.yml", dynFile)
	dyn := docBlock(t, traefikDynamic)
	if k != nil {
		mw := docBlock(t, traefikMTLS)
		mw = mw[strings.Index(mw, "\n")+1:] // without its title line
		mw = replaceAll(t, "Traefik client-certificate middleware", mw,
			"https://127.0.0.1:9091/", "https://"+authAddr+"/",
			"/etc/traefik/sluice/ca.crt", k.ca.file,
			"/etc/traefik/sluice/proxy.crt", k.clientCert,
			"/etc/traefik/sluice/proxy.key", k.clientKey)
		dyn = replaceAll(t, "Traefik dynamic configuration", dyn,
			"      forwardAuth:\n        address: http://127.0.0.1:8080/v1/auth\n", mw)
	} else {
		dyn = replaceAll(t, "Traefik dynamic configuration", dyn, "http://127.0.0.1:8080/", sluiceURL+"/")
	}
	dyn = replaceAll(t, "Traefik dynamic configuration", dyn, "http://127.0.0.1:9000", app)
	for _, e := range edit {
		static, dyn = e(static, dyn)
	}
	os.WriteFile(dynFile, []byte(dyn), 0o644)
	staticFile := filepath.Join(dir, "traefik.yml")
	os.WriteFile(staticFile, []byte(static), 0o644)
	cmd := exec.Command(traefikBinary(t), "--configFile="+staticFile)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	out, _ := os.Create(filepath.Join(dir, "out.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGracefully(cmd) })
	return fmt.Sprintf("http://127.0.0.1:%d", port), func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "out.log"))
		return string(b)
	}
}

// The Traefik recipe: exactly the burst admitted, the upstream reached by
// admitted requests only, 429 with Retry-After and the RateLimit fields
// from Traefik, a spoofed X-Forwarded-For (and X-Forwarded-Uri) ignored;
// with sluice down, Traefik answers 500 with an empty body.
func TestForwardAuthTraefik(t *testing.T) {
	upstream, hits, p, port := proxyRig(t)
	base, logs := startTraefik(t, p.addr, upstream.URL, port, nil, "")
	burstThroughProxy(t, base, hits, logs)

	p.cmd.Process.Kill()
	<-p.done
	res, err := http.Get(base + "/api")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 500 || len(body) != 0 || hits.Load() != 5 {
		t.Fatalf("rule: sluice down, Traefik answers 500 with an empty body (fails closed): %d %q, %d hits", res.StatusCode, body, hits.Load())
	}
}

// trustForwardHeader: false is what keeps a client from choosing its
// path where the entry point trusts forwarded headers (as behind a load
// balancer: forwardedHeaders.insecure here): with the recipe, a spoofed
// X-Forwarded-Uri changes nothing; with trustForwardHeader: true, it
// reaches sluice and spends the exports limit (authPolicy's, capacity 1).
func TestForwardAuthTraefikTrustForwardHeader(t *testing.T) {
	trusting := func(static, dyn string) (string, string) {
		return replaceAll(t, "Traefik static configuration", static, "    http:\n", "    forwardedHeaders:\n      insecure: true\n    http:\n"), dyn
	}
	for _, tc := range []struct {
		name  string
		edits []func(static, dyn string) (string, string)
		want  []int
	}{
		{"recipe", []func(string, string) (string, string){trusting}, []int{200, 200, 200}},
		{"trustForwardHeader true", []func(string, string) (string, string){trusting, func(static, dyn string) (string, string) {
			return static, replaceAll(t, "Traefik dynamic configuration", dyn, "trustForwardHeader: false", "trustForwardHeader: true")
		}}, []int{200, 429, 429}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream, _, p, port := proxyRig(t)
			base, logs := startTraefik(t, p.addr, upstream.URL, port, nil, "", tc.edits...)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if res, err := http.Get(base + "/warmup"); err == nil {
					res.Body.Close()
					if res.StatusCode == 200 {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("Traefik did not start: %s", logs())
				}
			}
			var got []int
			for range tc.want {
				req, _ := http.NewRequest("GET", base+"/api", nil)
				req.Header.Set("X-Forwarded-Uri", "/export/spoofed")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				got = append(got, res.StatusCode)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("a spoofed X-Forwarded-Uri: %v, want %v", got, tc.want)
			}
		})
	}
}

// On a 2xx, authResponseHeaders copies the RateLimit fields into the
// request Traefik proxies to the upstream, not into the client's answer.
func TestForwardAuthTraefikHeaders(t *testing.T) {
	got := make(chan string, 10)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("RateLimit")
		fmt.Fprintln(w, "upstream", r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, authPolicy)
	p := serve(t, "--config", pol)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base, logs := startTraefik(t, p.addr, upstream.URL, port, nil, "")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, err := http.Get(base + "/api")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				if res.Header.Get("RateLimit") != "" || res.Header.Get("RateLimit-Policy") != "" {
					t.Fatalf("rule: the client's 2xx answer carries no RateLimit fields: %v", res.Header)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Traefik did not start: %s", logs())
		}
	}
	if rl := <-got; !strings.Contains(rl, `"per_ip";r=4`) {
		t.Fatalf("rule: on a 2xx, authResponseHeaders copies RateLimit into the upstream's request: %q", rl)
	}
}
