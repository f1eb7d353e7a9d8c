package main

// Client certificates on --auth-listen (--auth-listen-client-ca), directly
// and the certificates every proxy test of them uses.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testbin"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

// newCA makes a CA and writes its certificate in dir as name.crt.
func newCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".crt")}
	if err := os.WriteFile(ca.file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue writes a certificate signed by ca and its key in dir (name.crt,
// name.key): a server's for 127.0.0.1 and the name sluice-auth, or a
// client's.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"sluice-auth"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// authPKI is what a client-certificate test of --auth-listen uses: one CA
// signing sluice's server certificate and the proxy's client certificate,
// and the token --auth-token-file holds (asked on --http, not on the
// client-certificate listener).
type authPKI struct {
	ca                    *testCA
	serverCert, serverKey string
	clientCert, clientKey string
	tokenFile, token      string
	serveArgs             []string // --auth-token-file and --auth-listen with its TLS flags
	otherCert, otherKey   string   // a client certificate signed by another CA
	dir                   string
}

func newAuthPKI(t *testing.T) *authPKI {
	t.Helper()
	dir := t.TempDir()
	k := &authPKI{dir: dir, ca: newCA(t, dir, "sluice-ca"), token: "s3cret-token", tokenFile: filepath.Join(dir, "token")}
	k.serverCert, k.serverKey = k.ca.issue(t, dir, "sluice-auth", true)
	k.clientCert, k.clientKey = k.ca.issue(t, dir, "proxy-client", false)
	k.otherCert, k.otherKey = newCA(t, dir, "other-ca").issue(t, dir, "other-client", false)
	os.WriteFile(k.tokenFile, []byte(k.token+"\n"), 0o600)
	k.serveArgs = []string{"--auth-token-file", k.tokenFile, "--auth-listen", "127.0.0.1:0",
		"--auth-listen-tls-cert", k.serverCert, "--auth-listen-tls-key", k.serverKey, "--auth-listen-client-ca", k.ca.file}
	return k
}

// client is an HTTPS client trusting k's CA, presenting cert and key (none
// when cert is "").
func (k *authPKI) client(t *testing.T, cert, key string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(k.ca.cert)
	cfg := &tls.Config{RootCAs: pool}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

// authAddr is the --auth-listen address p logged at startup.
func authAddr(t *testing.T, p *proc) string {
	t.Helper()
	a, _ := logRecord(t, p, "sluice serving")["auth"].(string)
	if a == "" {
		t.Fatalf("no auth address in the startup line: %s", p.text())
	}
	return a
}

// With --auth-listen-client-ca, /v1/auth on --auth-listen answers a client
// presenting a certificate the CA signs, without the bearer token; a
// connection without one, or with one another CA signs, fails its
// handshake; --http still asks for the token.
func TestAuthListenClientCert(t *testing.T) {
	k := newAuthPKI(t)
	pol := filepath.Join(k.dir, "p.yaml")
	writePolicy(t, pol, authPolicy)
	p := serve(t, append([]string{"--config", pol}, k.serveArgs...)...)
	rec := logRecord(t, p, "sluice serving")
	if rec["auth_tls"] != true || rec["auth_client_cert"] != true {
		t.Fatalf("startup line: auth_tls and auth_client_cert true: %v", rec)
	}
	url := "https://" + authAddr(t, p) + "/v1/auth"
	get := func(c *http.Client, hdr ...string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Forwarded-Uri", "/api")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
		}
		return res, err
	}
	res, err := get(k.client(t, k.clientCert, k.clientKey))
	if err != nil || res.StatusCode != 200 || res.Header.Get("RateLimit") == "" {
		t.Fatalf("rule: a client certificate the CA signs is the credential, no token asked: %v %v", res, err)
	}
	if res, err := get(k.client(t, k.clientCert, k.clientKey), "Authorization", "Bearer wrong"); err != nil || res.StatusCode != 200 {
		t.Fatalf("rule: a wrong bearer token changes nothing there: %v %v", res, err)
	}
	if res, err := get(k.client(t, "", "")); err == nil {
		t.Fatalf("rule: without a client certificate the handshake fails: %d", res.StatusCode)
	}
	if res, err := get(k.client(t, k.otherCert, k.otherKey), "Authorization", "Bearer "+k.token); err == nil {
		t.Fatalf("rule: a certificate another CA signs fails the handshake, token or not: %d", res.StatusCode)
	}
	if code, _ := call(t, p, "GET", "/v1/auth", "", "X-Forwarded-Uri", "/api"); code != 401 {
		t.Fatalf("rule: --http still asks for the token: %d", code)
	}
	if code, _ := call(t, p, "GET", "/v1/auth", "", "X-Forwarded-Uri", "/api", "Authorization", "Bearer "+k.token); code != 200 {
		t.Fatalf("rule: --http with the token: %d", code)
	}
}

// Without --auth-listen-client-ca, --auth-listen-tls-cert serves TLS with
// that certificate, and the token is asked there as on --http.
func TestAuthListenTLSCertAlone(t *testing.T) {
	k := newAuthPKI(t)
	pol := filepath.Join(k.dir, "p.yaml")
	writePolicy(t, pol, authPolicy)
	p := serve(t, "--config", pol, "--auth-token-file", k.tokenFile, "--auth-listen", "127.0.0.1:0",
		"--auth-listen-tls-cert", k.serverCert, "--auth-listen-tls-key", k.serverKey)
	c := k.client(t, "", "")
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {k.token, 200}} {
		req, _ := http.NewRequest("GET", "https://"+authAddr(t, p)+"/v1/auth", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want || res.TLS == nil {
			t.Fatalf("token %q: %d (TLS %v), want %d", tc.token, res.StatusCode, res.TLS != nil, tc.want)
		}
	}
}

// The --auth-listen TLS flags that do not go together are usage errors
// (exit 2), and a CA file that cannot be used stops serve before anything
// listens (exit 1, naming the file).
func TestAuthListenTLSFlagErrors(t *testing.T) {
	k := newAuthPKI(t)
	pol := filepath.Join(k.dir, "p.yaml")
	writePolicy(t, pol, authPolicy)
	garbage := filepath.Join(k.dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a PEM file\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"client CA without --auth-listen", []string{"--auth-listen-client-ca", k.ca.file}, 2, "give --auth-listen ADDR"},
		{"cert without --auth-listen", []string{"--auth-listen-tls-cert", k.serverCert, "--auth-listen-tls-key", k.serverKey}, 2, "give --auth-listen ADDR"},
		{"cert without key", []string{"--auth-listen", heldPort(t), "--auth-listen-tls-cert", k.serverCert}, 2, "go together"},
		{"client CA without a server certificate", []string{"--auth-listen", heldPort(t), "--auth-listen-client-ca", k.ca.file}, 2, "needs a server certificate"},
		{"CA file missing", []string{"--auth-listen", heldPort(t), "--auth-listen-tls-cert", k.serverCert, "--auth-listen-tls-key", k.serverKey,
			"--auth-listen-client-ca", filepath.Join(k.dir, "missing.crt")}, 1, filepath.Join(k.dir, "missing.crt")},
		{"CA file not PEM", []string{"--auth-listen", heldPort(t), "--auth-listen-tls-cert", k.serverCert, "--auth-listen-tls-key", k.serverKey,
			"--auth-listen-client-ca", garbage}, 1, garbage + ": no PEM certificate"},
		{"mismatched pair", []string{"--auth-listen", heldPort(t), "--auth-listen-tls-cert", k.serverCert, "--auth-listen-tls-key", k.clientKey}, 1, k.clientKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runServe(t, append([]string{"--config", pol, "--http", heldPort(t)}, tc.args...)...)
			if code != tc.code || !strings.Contains(out, tc.want) || strings.Contains(out, "sluice serving") {
				t.Fatalf("exit %d, want %d with %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}
}

// Each proxy's client-certificate recipe of docs/proxies.md: sluice serves
// --auth-token-file on --http and the client-certificate --auth-listen; the
// proxy holds only its client key (no token), and the recipe's burst checks
// pass through it.
func TestForwardAuthClientCert(t *testing.T) {
	t.Run("nginx", func(t *testing.T) {
		nginx := nginxBinary(t)
		k := newAuthPKI(t)
		upstream, hits, p, port := proxyRig(t, k.serveArgs...)
		block := docBlock(t, "# in location = /_sluice, in place of its proxy_pass line")
		block = replaceAll(t, "nginx client-certificate lines", block[strings.Index(block, "\n")+1:],
			"https://127.0.0.1:9091/", "https://"+authAddr(t, p)+"/",
			"/etc/nginx/sluice/proxy.crt", k.clientCert,
			"/etc/nginx/sluice/proxy.key", k.clientKey,
			"/etc/nginx/sluice/ca.crt", k.ca.file)
		server := nginxRecipe(t, strings.TrimPrefix(p.addr, "http://"), strings.TrimPrefix(upstream.URL, "http://"), port)
		server = replaceAll(t, "nginx recipe", server,
			"    proxy_pass http://"+strings.TrimPrefix(p.addr, "http://")+"/v1/auth?deny=403;\n", block)
		base, logs := runNginx(t, nginx, server, port)
		burstThroughProxy(t, base, hits, logs)
	})
	t.Run("caddy", func(t *testing.T) {
		caddy := caddyBinary(t)
		k := newAuthPKI(t)
		upstream, hits, p, port := proxyRig(t, k.serveArgs...)
		block := docBlock(t, "# forward_auth with a client certificate (--auth-listen-client-ca)")
		block = replaceAll(t, "Caddy client-certificate forward_auth", block[strings.Index(block, "\n")+1:],
			"https://127.0.0.1:9091", "https://"+authAddr(t, p),
			"/etc/caddy/sluice/proxy.crt", k.clientCert,
			"/etc/caddy/sluice/proxy.key", k.clientKey,
			"/etc/caddy/sluice/ca.crt", k.ca.file)
		conf := recipe(t, "caddyfile")
		start := strings.Index(conf, "\tforward_auth ")
		end := strings.Index(conf[start:], "\n\t}\n")
		if start < 0 || end < 0 {
			t.Fatalf("docs/proxies.md's Caddyfile has no forward_auth block:\n%s", conf)
		}
		conf = conf[:start] + block + conf[start+end+len("\n\t}\n"):]
		base, logs := runCaddy(t, caddy, conf, port, upstream.URL)
		burstThroughProxy(t, base, hits, logs)
	})
	t.Run("traefik", func(t *testing.T) {
		traefikBinary(t)
		k := newAuthPKI(t)
		upstream, hits, p, port := proxyRig(t, k.serveArgs...)
		base, logs := startTraefik(t, p.addr, upstream.URL, port, k, authAddr(t, p))
		burstThroughProxy(t, base, hits, logs)
	})
}

// nginxBinary is nginx on the PATH (Debian's is /usr/sbin/nginx).
func nginxBinary(t *testing.T) string {
	t.Helper()
	return testbin.Need(t, testbin.Nginx)
}

// runNginx runs nginx with server (the recipe's upstream and server
// blocks) in a configuration of its own, listening on port; it returns
// the base URL and the logs.
func runNginx(t *testing.T, nginx, server string, port int) (string, func() string) {
	t.Helper()
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
`, dir, server)
	os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644)
	cmd := exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	out, _ := os.Create(filepath.Join(dir, "out.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGracefully(cmd) })
	return fmt.Sprintf("http://127.0.0.1:%d", port), func() string {
		log, _ := os.ReadFile(filepath.Join(dir, "out.log"))
		elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return string(log) + string(elog)
	}
}

// caddyBinary is $SLUICE_CADDY, else caddy on the PATH.
func caddyBinary(t *testing.T) string {
	t.Helper()
	return testbin.Need(t, testbin.Caddy)
}

// runCaddy runs the Caddyfile conf (the recipe's, its forward_auth already
// pointed at sluice) listening on port, proxying to app; it returns the
// base URL and the logs.
func runCaddy(t *testing.T, caddy, conf string, port int, app string) (string, func() string) {
	t.Helper()
	conf = replaceAll(t, "Caddyfile", conf,
		"http://127.0.0.1:8000", fmt.Sprintf("http://127.0.0.1:%d", port),
		"reverse_proxy upstream:9000", "reverse_proxy "+strings.TrimPrefix(app, "http://"))
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
	t.Cleanup(func() { stopGracefully(cmd) })
	return fmt.Sprintf("http://127.0.0.1:%d", port), func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "out.log"))
		return string(b)
	}
}
