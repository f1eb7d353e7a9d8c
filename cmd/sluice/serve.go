package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
)

type serveCmd struct {
	Config             string        `help:"Policy file (hot-reloaded on SIGHUP and when it changes)." type:"path" xor:"config"`
	EnvoyConfig        string        `help:"Directory of Envoy ratelimit configuration files (*.yaml), served over --grpc instead of a policy." type:"path" xor:"config"`
	HTTP               string        `default:"127.0.0.1:8080" help:"Address of the HTTP/JSON API."`
	GRPC               string        `help:"Address of Envoy's RateLimitService v3 over gRPC (off unless given), serving the policy or --envoy-config."`
	AuthTokenFile      string        `help:"File holding a bearer token required on /v1/ endpoints (compared in constant time)." type:"path"`
	TLSCert            string        `name:"tls-cert" help:"TLS certificate file (PEM, with --tls-key), loaded before anything listens." type:"path"`
	TLSKey             string        `name:"tls-key" help:"TLS key file (PEM)." type:"path"`
	MaxKeys            int           `default:"1000000" help:"Most keys held in memory, at least 1; beyond it new keys are refused (503 store_full)."`
	MaxWait            time.Duration `default:"10s" help:"Cap on a request's max_wait_ms; 0: no server-side waiting (every check is decided at once)."`
	MaxWaiting         int           `default:"1024" help:"Most requests held waiting at once, at least 1; beyond it requests are decided at once."`
	MaxBody            int64         `default:"65536" help:"Largest request body in bytes, at least 1."`
	Idempotency        time.Duration `default:"5m" help:"How long a request_id's answer is remembered (positive)."`
	LeaseWindow        time.Duration `default:"10m" help:"How long a check's receipt is kept for /v1/settle (positive; a lease holding in-flight slots is kept until they expire)."`
	MaxReceipts        int           `default:"1000000" help:"Most receipts kept for /v1/settle, at least 1; beyond it the oldest are dropped (settle answers 404 receipt_dropped; counted in sluice_receipts_dropped_total)."`
	Reload             time.Duration `default:"1s" help:"How often the policy file (or --envoy-config directory) is checked for changes; 0: not watched (SIGHUP still reloads)."`
	Store              string        `default:"memory" help:"Where limit state lives: memory (this process), redis://[user:password@]host:port[/db], rediss://... (TLS), or redis+cluster://host1:port,host2:port,... (Redis Cluster)."`
	StorePrefix        string        `default:"sluice:" help:"Prefix of every Redis key (no braces)."`
	StorePoolSize      int           `help:"Redis connections per node for blocking calls (0: rueidis' default; decisions are pipelined whatever it is)."`
	StoreTimeout       time.Duration `default:"250ms" help:"Bound on every Redis call (positive); a slow Redis never holds a request longer."`
	LeaseTokens        bool          `help:"Lease batches of tokens per hot key from Redis and spend them locally (far fewer round trips; never over-admits; unspent tokens return after --lease-ttl)."`
	LeaseTTL           time.Duration `name:"lease-ttl" default:"1s" help:"How long leased tokens may be spent locally before the rest returns to Redis (positive)."`
	OnStoreError       string        `default:"fail_open" enum:"fail_open,fail_closed,local" help:"When Redis cannot be reached: fail_open admits, fail_closed refuses (503), local enforces each limit in process with its budget divided by --instances. A limit's on_store_error overrides it."`
	Instances          int           `default:"1" help:"Instances sharing the budget, at least 1 (divides budgets under --on-store-error local)."`
	ReadyRequiresStore bool          `help:"/readyz answers 503 whenever Redis cannot be reached (without it, 200 \"degraded\" unless a limit in force fails closed)."`
	LogLevel           string        `default:"info" enum:"debug,info,warn,error" help:"Least severe log records written: debug, info, warn or error."`
	LogFormat          string        `default:"json" enum:"json,text" help:"Log records on stderr: json (one object a line) or text (key=value)."`
}

// drainTimeout bounds the shutdown: in-flight requests and RPCs have this
// long to finish before their connections are closed.
const drainTimeout = 15 * time.Second

// Validate checks the flags before anything starts (kong calls it after
// parsing; its error is a usage error, exit status 2): a configuration is
// given, and every numeric flag is in range.
func (c serveCmd) Validate() error {
	switch {
	case c.Config == "" && c.EnvoyConfig == "":
		return errors.New("serve needs --config (a sluice policy) or --envoy-config (Envoy's format)")
	case c.EnvoyConfig != "" && c.GRPC == "":
		return errors.New("--envoy-config is served over gRPC: give --grpc ADDR")
	}
	for _, x := range []struct {
		bad   bool
		flag  string
		value any
		want  string
	}{
		{c.MaxKeys < 1, "--max-keys", c.MaxKeys, "must be at least 1"},
		{c.MaxWait < 0, "--max-wait", c.MaxWait, "must be 0 (no waiting) or more"},
		{c.MaxWaiting < 1, "--max-waiting", c.MaxWaiting, "must be at least 1"},
		{c.MaxBody < 1, "--max-body", c.MaxBody, "must be at least 1"},
		{c.Idempotency <= 0, "--idempotency", c.Idempotency, "must be positive"},
		{c.LeaseWindow <= 0, "--lease-window", c.LeaseWindow, "must be positive"},
		{c.MaxReceipts < 1, "--max-receipts", c.MaxReceipts, "must be at least 1"},
		{c.Reload < 0, "--reload", c.Reload, "must be 0 (no file watching) or more"},
		{c.StorePoolSize < 0, "--store-pool-size", c.StorePoolSize, "must be 0 (rueidis' default) or more"},
		{c.StoreTimeout <= 0, "--store-timeout", c.StoreTimeout, "must be positive"},
		{c.LeaseTTL <= 0, "--lease-ttl", c.LeaseTTL, "must be positive"},
		{c.Instances < 1, "--instances", c.Instances, "must be at least 1"},
	} {
		if x.bad {
			return fmt.Errorf("%s %v: %s", x.flag, x.value, x.want)
		}
	}
	return nil
}

// logger is the logger --log-level and --log-format ask for, on w.
func (c serveCmd) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", c.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch c.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q is not json or text", c.LogFormat)
}

// loadTLS reads and checks the certificate and key; errors name the file.
func (c serveCmd) loadTLS() (*tls.Config, error) {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.TLSCert == "" {
		return nil, nil
	}
	certPEM, err := os.ReadFile(c.TLSCert)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", c.TLSCert, c.TLSKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// envoyState is the Envoy configuration in force, with its digest.
type envoyState struct {
	cfg     *envoyrls.Config
	version string
}

// envoyPolicy is GET /v1/policy in Envoy-config mode.
type envoyPolicy struct {
	Version string                   `json:"version"`
	Source  string                   `json:"source"`
	Domains []envoyrls.DomainSummary `json:"domains"`
}

func (c serveCmd) Run(e *env) error {
	log, err := c.logger(e.stderr)
	if err != nil {
		return err
	}
	var p *policy.Policy
	var envoy atomic.Pointer[envoyState]
	var last []byte // what the configuration in force was read from
	if c.Config != "" {
		if p, err = policy.Load(c.Config); err != nil {
			return err
		}
		last = p.Source
	} else {
		last = dirDigest(c.EnvoyConfig)
		cfg, err := envoyrls.LoadDir(c.EnvoyConfig)
		if err != nil {
			return envoyDirError(c.EnvoyConfig, err)
		}
		envoy.Store(&envoyState{cfg: cfg, version: digestVersion(last)})
	}
	token := ""
	if c.AuthTokenFile != "" {
		b, err := os.ReadFile(c.AuthTokenFile)
		if err != nil {
			return fmt.Errorf("--auth-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return errors.New("--auth-token-file: the file is empty")
		}
	}
	tlsCfg, err := c.loadTLS()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reloads := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_config_reloads_total",
		Help: "Reloads of the policy (or Envoy configuration) that took effect."})
	reloadErrors := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_config_reload_errors_total",
		Help: "Reloads rejected (the file unreadable or invalid); the configuration in force stays."})
	reg.MustRegister(reloads, reloadErrors)
	st, shared, err := c.openStore(log, reg)
	if err != nil {
		return err
	}
	// Until the servers run, a failure only has the store to close.
	started := false
	defer func() {
		if !started {
			st.Close()
		}
	}()
	var lim *limiter.Limiter
	if p != nil {
		if lim, err = limiter.New(p, st, limiter.WithLogger(log), limiter.WithRegisterer(reg)); err != nil {
			return err
		}
	}
	bookCfg := book.Config{IdempotencyWindow: c.Idempotency, LeaseWindow: c.LeaseWindow, MaxReceipts: c.MaxReceipts}
	var bk book.Book
	if shared.redis != nil {
		bk = redisstore.NewBook(shared.redis, bookCfg)
	}
	cfg := server.Config{
		Limiter: lim, Gatherer: reg, Registerer: reg, AuthToken: token, MaxBodyBytes: c.MaxBody, MaxWait: c.MaxWait, NoWait: c.MaxWait == 0,
		MaxWaiting: c.MaxWaiting, IdempotencyWindow: c.Idempotency, LeaseWindow: c.LeaseWindow, MaxReceipts: c.MaxReceipts,
		Book: bk, Logger: log, Ready: shared.ready, ReadyRequiresStore: c.ReadyRequiresStore,
	}
	if shared.ready != nil {
		cfg.StoreMode = c.OnStoreError
	}
	if p == nil {
		cfg.EnvoyPolicy = func() any {
			es := envoy.Load()
			return envoyPolicy{Version: es.version, Source: c.EnvoyConfig, Domains: es.cfg.Summary()}
		}
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}

	// Listen on every address before serving any.
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return fmt.Errorf("--http %s: %w", c.HTTP, err)
	}
	var gln *quietListener
	if c.GRPC != "" {
		l, err := net.Listen("tcp", c.GRPC)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--grpc: %w", err)
		}
		gln = newQuietListener(l)
	}
	// Signals are caught from here on: a SIGTERM once "serving" is logged
	// always drains.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(stop)
	defer signal.Stop(hup)

	// Bounded reads and writes: a slow client cannot hold a connection
	// forever (writes allow for requests held up to --max-wait).
	fresh := &freshConns{m: map[net.Conn]struct{}{}}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: satAdd(c.MaxWait, 30*time.Second), IdleTimeout: 2 * time.Minute, TLSConfig: tlsCfg,
		ConnState: fresh.track,
		// net/http's own messages (a TLS handshake that failed, ...) are
		// records of the structured log, not lines of plain text.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 2)
	started = true
	go func() {
		if tlsCfg != nil {
			errc <- hs.ServeTLS(ln, "", "") // the certificate is in TLSConfig
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	var gs *grpc.Server
	var svc *envoyrls.Service
	grpcAddr := ""
	if gln != nil {
		var impl rls.RateLimitServiceServer
		if p == nil {
			svc = envoyrls.NewService(envoy.Load().cfg, st)
			impl = svc
		} else {
			impl = envoyrls.NewPolicyService(lim)
		}
		gs = newGRPC(impl)
		grpcAddr = gln.Addr().String()
		go func() { errc <- gs.Serve(gln) }()
	}
	common := []any{"http", ln.Addr().String(), "grpc", grpcAddr, "tls", tlsCfg != nil, "version", versionString(), "store", shared.name}
	if p != nil {
		log.Info("sluice serving", append(common, "policy", c.Config, "policy_version", p.Version, "limits", len(p.Limits))...)
	} else {
		es := envoy.Load()
		log.Info("sluice serving", append(common, "envoy_config", c.EnvoyConfig, "policy_version", es.version, "domains", len(es.cfg.Domains))...)
	}
	var tick <-chan time.Time
	if c.Reload > 0 {
		t := time.NewTicker(c.Reload)
		defer t.Stop()
		tick = t.C
	}
	lastReadErr := ""
	reload := func(why string) {
		if p == nil {
			d := dirDigest(c.EnvoyConfig)
			if why == "file change" && bytes.Equal(d, last) {
				return
			}
			last = d
			nc, err := envoyrls.LoadDir(c.EnvoyConfig)
			if err != nil {
				reloadErrors.Inc()
				log.Error("envoy config reload rejected; the old configuration stays in force", "reason", why, "error", err,
					"policy_version", envoy.Load().version)
				return
			}
			es := &envoyState{cfg: nc, version: digestVersion(d)}
			svc.SetConfig(nc)
			envoy.Store(es)
			reloads.Inc()
			log.Info("envoy config reloaded", "reason", why, "policy_version", es.version, "domains", len(nc.Domains))
			return
		}
		src, err := os.ReadFile(c.Config)
		if err != nil {
			// An unreadable file is reported once, not at every tick.
			if why == "file change" && err.Error() == lastReadErr {
				return
			}
			lastReadErr = err.Error()
			reloadErrors.Inc()
			log.Error("policy reload failed; the old policy stays in force", "reason", why, "error", err,
				"policy_version", lim.Policy().Version)
			return
		}
		lastReadErr = ""
		if why == "file change" && bytes.Equal(src, last) {
			return
		}
		last = src
		np, err := policy.Parse(src)
		if err == nil {
			err = lim.SetPolicy(np)
		}
		if err != nil {
			reloadErrors.Inc()
			log.Error("policy reload rejected; the old policy stays in force", "reason", why, "error", err,
				"policy_version", lim.Policy().Version)
			return
		}
		reloads.Inc()
		log.Info("policy reloaded", "reason", why, "policy_version", np.Version, "limits", len(np.Limits))
	}
	for {
		select {
		case err := <-errc:
			// A server stopped serving: stop the other, then the store.
			hs.Close()
			if gs != nil {
				gln.closeAll()
				gs.Stop()
			}
			st.Close()
			return err
		case <-hup:
			reload("SIGHUP")
		case <-tick:
			reload("file change")
		case sig := <-stop:
			log.Info("shutting down: draining in-flight requests", "signal", sig.String())
			ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
			var wg sync.WaitGroup
			var httpErr, grpcErr error
			wg.Go(func() { httpErr = drainHTTP(ctx, hs, fresh) })
			if gs != nil {
				wg.Go(func() { grpcErr = drainGRPC(ctx, gs, gln) })
			}
			wg.Wait()
			cancel()
			// The store closes last: nothing can call it any more.
			st.Close()
			if err := errors.Join(httpErr, grpcErr); err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			log.Info("stopped")
			return nil
		}
	}
}

// satAdd is a+b, at most the largest duration.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// freshConns tracks the HTTP connections that have not yet sent a whole
// request (http.StateNew): http.Server.Shutdown waits up to 5 s for those,
// so the drain closes them itself.
type freshConns struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

// track is the http.Server's ConnState hook.
func (f *freshConns) track(c net.Conn, s http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == http.StateNew {
		f.m[c] = struct{}{}
	} else {
		delete(f.m, c)
	}
}

// closeAll closes every connection that has sent no whole request.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	conns := make([]net.Conn, 0, len(f.m))
	for c := range f.m {
		conns = append(conns, c)
		delete(f.m, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// drainHTTP stops hs: idle and fresh connections are closed at once (a
// connection that has not sent a whole request when the drain starts is
// not served), requests in flight finish until ctx ends, then every
// connection is closed.
func drainHTTP(ctx context.Context, hs *http.Server, fresh *freshConns) error {
	done := make(chan error, 1)
	go func() { done <- hs.Shutdown(ctx) }()
	// Closed again while Shutdown runs: a connection accepted as it began
	// may register after the first pass.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		fresh.closeAll()
		select {
		case err := <-done:
			if err != nil {
				hs.Close()
				return fmt.Errorf("HTTP requests still in flight after %v: %w", drainTimeout, err)
			}
			return nil
		case <-t.C:
		}
	}
}

// drainGRPC stops gs gracefully (GOAWAY; RPCs in flight finish) until ctx
// ends, then closes every connection. Connections that have sent nothing
// are closed at once (grpc waits for their handshake otherwise).
func drainGRPC(ctx context.Context, gs *grpc.Server, ln *quietListener) error {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ln.closeQuiet()
		select {
		case <-done:
			return nil
		case <-t.C:
		case <-ctx.Done():
			ln.closeAll()
			gs.Stop()
			<-done
			return fmt.Errorf("gRPC calls still in flight after %v", drainTimeout)
		}
	}
}

// quietListener tracks the connections it accepts, to close on shutdown
// those that have sent nothing (closeQuiet) or all of them (closeAll).
type quietListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*heardConn]struct{}
}

func newQuietListener(l net.Listener) *quietListener {
	return &quietListener{Listener: l, conns: map[*heardConn]struct{}{}}
}

// Accept implements net.Listener.
func (l *quietListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	hc := &heardConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[hc] = struct{}{}
	l.mu.Unlock()
	return hc, nil
}

func (l *quietListener) closeQuiet() {
	l.mu.Lock()
	var quiet []*heardConn
	for c := range l.conns {
		if !c.heard.Load() {
			quiet = append(quiet, c)
		}
	}
	l.mu.Unlock()
	for _, c := range quiet {
		c.Close()
	}
}

func (l *quietListener) closeAll() {
	l.mu.Lock()
	all := make([]*heardConn, 0, len(l.conns))
	for c := range l.conns {
		all = append(all, c)
	}
	l.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// heardConn records whether its peer has sent anything.
type heardConn struct {
	net.Conn
	l     *quietListener
	heard atomic.Bool
	once  sync.Once
}

// Read implements net.Conn.
func (c *heardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.heard.Store(true)
	}
	return n, err
}

// Close implements net.Conn.
func (c *heardConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// newGRPC is the gRPC server of Envoy's RateLimitService (from the policy
// or Envoy's configuration), with the gRPC health service and reflection.
func newGRPC(svc rls.RateLimitServiceServer) *grpc.Server {
	// grpc-go's default, a goroutine per stream: fixed stream workers (2, 8
	// or 64 of them) measured no faster at 1, 16 or 64 clients
	// (BENCHMARKS.md, "gRPC stream workers"), and when they are all busy
	// grpc-go starts a goroutine per stream anyway.
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(256 << 10))
	rls.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs
}

// digestVersion is the policy_version of an Envoy configuration: the first
// 16 hex digits of its dirDigest (as a policy's Version is of its file).
func digestVersion(d []byte) string { return hex.EncodeToString(d)[:16] }

// dirDigest hashes the *.yaml files of dir (names and contents), to notice
// changes.
func dirDigest(dir string) []byte {
	files, _ := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return h.Sum(nil)
}

// sharedStore is what serve needs to know of a shared store.
type sharedStore struct {
	name  string                          // for the log: "memory" or the URL without password
	redis *redisstore.Store               // nil in memory
	ready func(ctx context.Context) error // nil in memory
}

// openStore opens --store: the in-memory store, or Redis wrapped in the
// failover policy (and token leasing with --lease-tokens).
func (c serveCmd) openStore(log *slog.Logger, reg prometheus.Registerer) (store.Store, sharedStore, error) {
	if c.Store == "" || c.Store == "memory" {
		return memstore.New(memstore.WithMaxKeys(c.MaxKeys)), sharedStore{name: "memory"}, nil
	}
	if c.Instances < 1 {
		return nil, sharedStore{}, fmt.Errorf("--instances %d must be at least 1", c.Instances)
	}
	rs, err := redisstore.Open(c.Store, redisstore.WithPrefix(c.StorePrefix), redisstore.WithTimeout(c.StoreTimeout),
		redisstore.WithPoolSize(c.StorePoolSize))
	if err != nil {
		return nil, sharedStore{}, fmt.Errorf("--store: %w", err)
	}
	var primary store.Store = rs
	if c.LeaseTokens {
		primary = lease.New(rs, lease.WithTTL(c.LeaseTTL))
	}
	fo, err := failover.New(failover.Config{Primary: primary, Mode: c.OnStoreError, Instances: c.Instances,
		MaxKeys: c.MaxKeys, Logger: log, Registerer: reg})
	if err != nil {
		rs.Close()
		return nil, sharedStore{}, err
	}
	// Find out now whether Redis answers: if not, the instance starts
	// degraded (logged, gauge set) and returns to Redis when it answers.
	ctx, cancel := context.WithTimeout(context.Background(), c.StoreTimeout)
	fo.Ping(ctx)
	cancel()
	return fo, sharedStore{name: redisstore.Redact(c.Store), redis: rs, ready: fo.Ping}, nil
}
