package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key as
// PEM files in dir, named after name; it returns their paths and the
// certificate's DER.
func writeCert(t *testing.T, dir, name string) (certFile, keyFile string, der []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
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
	return certFile, keyFile, der
}

// A certificate or key that cannot be loaded stops serve before anything
// listens or "serving" is logged: exit 1 naming the file.
func TestServeTLSBadFiles(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, servePolicy)
	cert, key, _ := writeCert(t, dir, "a")
	_, otherKey, _ := writeCert(t, dir, "b")
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a PEM file\n"), 0o600)
	unreadable := filepath.Join(dir, "unreadable.key")
	os.WriteFile(unreadable, []byte("x"), 0o000)
	for _, tc := range []struct {
		name, cert, key, want string
		needsNonRoot          bool
	}{
		{name: "missing cert", cert: filepath.Join(dir, "missing.crt"), key: key, want: filepath.Join(dir, "missing.crt")},
		{name: "missing key", cert: cert, key: filepath.Join(dir, "missing.key"), want: filepath.Join(dir, "missing.key")},
		{name: "garbage key", cert: cert, key: garbage, want: garbage},
		{name: "garbage cert", cert: garbage, key: key, want: garbage},
		{name: "mismatched pair", cert: cert, key: otherKey, want: otherKey},
		{name: "unreadable key", cert: cert, key: unreadable, want: unreadable, needsNonRoot: true},
		{name: "key is a directory", cert: cert, key: dir, want: dir}, // unreadable even by root
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsNonRoot && os.Getuid() == 0 {
				t.Skip("running as root: a file with mode 000 is readable all the same")
			}
			code, out := runServe(t, "--config", pol, "--http", heldPort(t), "--tls-cert", tc.cert, "--tls-key", tc.key)
			if code != 1 || !strings.Contains(out, tc.want) || strings.Contains(out, "sluice serving") || strings.Contains(out, "address already in use") {
				t.Fatalf("exit %d, want 1 naming %s:\n%s", code, tc.want, out)
			}
		})
	}
}

// A good pair serves HTTPS with that certificate.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, servePolicy)
	cert, key, der := writeCert(t, dir, "a")
	p := serve(t, "--config", pol, "--tls-cert", cert, "--tls-key", key)
	if !p.logged(`"tls":true`) {
		t.Fatalf("startup line without tls: %s", p.text())
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(strings.Replace(p.addr, "http://", "https://", 1) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.TLS.PeerCertificates) == 0 || !resp.TLS.PeerCertificates[0].Equal(c) {
		t.Fatalf("HTTPS: %d %v", resp.StatusCode, resp.TLS)
	}
	// Plain HTTP to the HTTPS port: net/http's message about it is a record
	// of the JSON log, not a line of text.
	if resp, err := http.Get(p.addr + "/healthz"); err == nil {
		resp.Body.Close()
	}
	p.waitLog(t, "TLS handshake error")
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		if !strings.HasPrefix(l, "{") {
			t.Errorf("a log line that is not JSON: %q", l)
		}
	}
}

// An --http address that cannot be listened on is named.
func TestServeBadHTTPAddress(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	out, err := exec.Command(binary, "serve", "--config", pol, "--http", "nope").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--http nope: ") {
		t.Fatalf("%v %s", err, out)
	}
}
