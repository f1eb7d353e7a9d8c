// The TLS of --auth-listen: its own certificate, and client certificates
// (--auth-listen-client-ca) as the credential of forward-auth.

package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// validateAuthTLS checks the --auth-listen TLS flags go together (a usage
// error, exit 2): they need --auth-listen, the certificate and key come in
// a pair, and client certificates need a server certificate.
func (c serveCmd) validateAuthTLS() error {
	if c.AuthListen == "" {
		for _, f := range []struct{ name, value string }{
			{"--auth-listen-tls-cert", c.AuthListenTLSCert},
			{"--auth-listen-tls-key", c.AuthListenTLSKey},
			{"--auth-listen-client-ca", c.AuthListenClientCA},
		} {
			if f.value != "" {
				return fmt.Errorf("%s configures --auth-listen's TLS: give --auth-listen ADDR", f.name)
			}
		}
		return nil
	}
	if (c.AuthListenTLSCert == "") != (c.AuthListenTLSKey == "") {
		return errors.New("--auth-listen-tls-cert and --auth-listen-tls-key go together")
	}
	if c.AuthListenClientCA != "" && c.AuthListenTLSCert == "" && c.TLSCert == "" {
		return errors.New("--auth-listen-client-ca needs a server certificate on --auth-listen: --auth-listen-tls-cert and --auth-listen-tls-key (or --tls-cert and --tls-key)")
	}
	return nil
}

// loadAuthTLS is --auth-listen's TLS configuration: its own certificate
// (--auth-listen-tls-cert), else the HTTP listener's (main, nil without
// TLS), and with --auth-listen-client-ca, client certificates required and
// verified against those CAs (tls.RequireAndVerifyClientCert: a connection
// without one signed by them fails its handshake). Files are read and
// checked before anything listens; errors name the file.
func (c serveCmd) loadAuthTLS(main *tls.Config) (*tls.Config, error) {
	if c.AuthListen == "" {
		return nil, nil
	}
	cfg := main
	if c.AuthListenTLSCert != "" {
		certPEM, err := os.ReadFile(c.AuthListenTLSCert)
		if err != nil {
			return nil, fmt.Errorf("--auth-listen-tls-cert: %w", err)
		}
		keyPEM, err := os.ReadFile(c.AuthListenTLSKey)
		if err != nil {
			return nil, fmt.Errorf("--auth-listen-tls-key: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("--auth-listen-tls-cert %s, --auth-listen-tls-key %s: %w", c.AuthListenTLSCert, c.AuthListenTLSKey, err)
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if c.AuthListenClientCA == "" {
		return cfg, nil
	}
	pool, err := loadCAs(c.AuthListenClientCA)
	if err != nil {
		return nil, err
	}
	cfg = cfg.Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	return cfg, nil
}

// loadCAs reads --auth-listen-client-ca: PEM CERTIFICATE blocks, at least
// one, each a parseable certificate.
func loadCAs(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--auth-listen-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--auth-listen-client-ca %s: certificate %d: %w", file, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("--auth-listen-client-ca %s: no PEM certificate in the file", file)
	}
	return pool, nil
}
