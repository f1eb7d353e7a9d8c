// sluice ratelimit with CONFIG_TYPE=GRPC_XDS_SOTW: the rate-limit config followed from an xDS server, from envoyproxy/ratelimit's environment.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/envoyrls/xds"
)

// The reference's defaults (src/settings/settings.go there).
const (
	defaultXDSServerURL = "localhost:18000"
	defaultXDSNodeID    = "default"
)

// startXDS follows the xDS management server that envoyproxy/ratelimit's
// environment names (CONFIG_GRPC_XDS_*, XDS_CLIENT_*), calling
// svc.SetConfig with every good snapshot; bad ones are NACKed and the
// config in force stays. Unless FORCE_START_WITHOUT_INITIAL_CONFIG is
// true it returns only once the first good snapshot is applied, as the
// reference waits for its first config (a server that is down is retried
// meanwhile); it returns ctx's error if ctx ends first, and at once an
// error naming the variable for a value it cannot use. wait blocks until
// the client has stopped (ctx ended) and returns nil then.
func startXDS(ctx context.Context, getenv func(string) string, svc *envoyrls.Service, log *slog.Logger) (wait func() error, err error) {
	o, force, err := xdsOptions(getenv)
	if err != nil {
		return nil, err
	}
	o.Logger = log
	o.Loaded = svc.NoteConfigLoad
	first := make(chan struct{})
	var once sync.Once
	stopped := make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = xds.Run(ctx, o, func(cfg *envoyrls.Config) error {
			svc.SetConfig(cfg)
			once.Do(func() { close(first) })
			return nil
		})
	}()
	wait = func() error {
		<-stopped
		return runErr
	}
	if force {
		log.Info("xds: starting without an initial config (FORCE_START_WITHOUT_INITIAL_CONFIG)", "xds_server", o.ServerURL)
		return wait, nil
	}
	log.Info("xds: waiting for the first rate-limit config", "xds_server", o.ServerURL, "node_id", o.NodeID)
	select {
	case <-first:
		return wait, nil
	case <-stopped: // before any config: bad options, or ctx ended
		switch {
		case runErr != nil:
			return wait, runErr
		case ctx.Err() != nil:
			return wait, ctx.Err()
		}
		return wait, errors.New("xds: client stopped before the first config")
	case <-ctx.Done():
		return wait, ctx.Err()
	}
}

// xdsOptions reads the xDS client's variables, named and defaulted as
// envoyproxy/ratelimit's settings.go does, and whether
// FORCE_START_WITHOUT_INITIAL_CONFIG is true.
func xdsOptions(getenv func(string) string) (o xds.Options, force bool, err error) {
	env := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	bad := func(k string, why any) error { return fmt.Errorf("%s=%q: %v", k, getenv(k), why) }
	boolean := func(k string, def bool) (bool, error) {
		v := env(k, "")
		if v == "" {
			return def, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, bad(k, "not true or false")
		}
		return b, nil
	}
	duration := func(k string) (time.Duration, error) {
		v := env(k, "")
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, bad(k, "not a positive duration such as 10s")
		}
		return d, nil
	}
	if force, err = boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false); err != nil {
		return o, false, err
	}
	o.ServerURL = env("CONFIG_GRPC_XDS_SERVER_URL", defaultXDSServerURL)
	// host:port, or a gRPC target with its scheme (dns:///host:port).
	if !strings.Contains(o.ServerURL, "://") {
		if _, _, err := net.SplitHostPort(o.ServerURL); err != nil {
			return o, false, bad("CONFIG_GRPC_XDS_SERVER_URL", "not host:port (or a gRPC target such as dns:///host:port)")
		}
	}
	o.NodeID = env("CONFIG_GRPC_XDS_NODE_ID", defaultXDSNodeID)
	// "key1=val1,key2=val2"; an entry without "=" is skipped, as there.
	for _, kv := range strings.Split(env("CONFIG_GRPC_XDS_NODE_METADATA", ""), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if o.NodeMetadata == nil {
				o.NodeMetadata = map[string]string{}
			}
			o.NodeMetadata[k] = v
		}
	}
	// envconfig's map syntax: "key1:val1,key2:val2".
	if h := env("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ""); h != "" {
		o.Headers = map[string]string{}
		for _, kv := range strings.Split(h, ",") {
			k, v, ok := strings.Cut(kv, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return o, false, bad("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "not key:value pairs separated by commas")
			}
			o.Headers[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	if o.TLS, err = xdsTLS(getenv, boolean, bad); err != nil {
		return o, false, err
	}
	// Reconnection: XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, else
	// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (the reference's delay
	// between attempts to open the stream), else 1 s; then doubling up to
	// XDS_CLIENT_BACKOFF_MAX_INTERVAL (60 s), each delay shortened by a
	// random fraction of at most XDS_CLIENT_BACKOFF_RANDOM_FACTOR (0.5)
	// unless XDS_CLIENT_BACKOFF_JITTER is false.
	retry, err := duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")
	if err != nil {
		return o, false, err
	}
	if o.Backoff.Initial, err = duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"); err != nil {
		return o, false, err
	}
	if o.Backoff.Initial == 0 {
		o.Backoff.Initial = retry
	}
	if o.Backoff.Max, err = duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL"); err != nil {
		return o, false, err
	}
	if v := env("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", ""); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			return o, false, bad("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "not a number from 0 to 1")
		}
		o.Backoff.Jitter = f
		if f == 0 {
			o.Backoff.Jitter = -1
		}
	}
	jitter, err := boolean("XDS_CLIENT_BACKOFF_JITTER", true)
	if err != nil {
		return o, false, err
	}
	if !jitter {
		o.Backoff.Jitter = -1
	}
	if v := env("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, false, bad("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "not a whole number of bytes")
		}
		o.MaxRecvMsgSize = n
	}
	return o, force, nil
}

// xdsTLS is the TLS configuration for the xDS server when
// CONFIG_GRPC_XDS_SERVER_USE_TLS is true (nil otherwise, and the other
// variables then unused, as there): the server verified against
// CONFIG_GRPC_XDS_SERVER_TLS_CACERT added to the system's roots (the
// system's alone when unset), under the name CONFIG_GRPC_XDS_SERVER_TLS_SAN
// when set (else the URL's host), and the client certificate
// CONFIG_GRPC_XDS_CLIENT_TLS_CERT with its key CONFIG_GRPC_XDS_CLIENT_TLS_KEY
// when both are set (mTLS).
func xdsTLS(getenv func(string) string, boolean func(string, bool) (bool, error), bad func(string, any) error) (*tls.Config, error) {
	on, err := boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)
	if err != nil || !on {
		return nil, err
	}
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: get("CONFIG_GRPC_XDS_SERVER_TLS_SAN")}
	cert, key := get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, bad("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != "":
		return nil, bad("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "set without CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	case key != "":
		return nil, bad("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "set without CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
	}
	if ca := get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, bad("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", err)
		}
		pool, _ := x509.SystemCertPool()
		if pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, bad("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "no PEM certificate in the file")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
