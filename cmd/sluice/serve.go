// sluice serve: its flags, their validation, and the services it starts.

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

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
	MaxKeys            int           `default:"1000000" help:"Most keys held in memory, at least 1; at the cap a new key evicts an idle key, else one not used since the eviction hand last passed it (approximately the least recently used)."`
	MaxWait            time.Duration `default:"10s" help:"Cap on a request's max_wait_ms; 0: no server-side waiting (every check is decided at once)."`
	MaxWaiting         int           `default:"1024" help:"Most requests held waiting at once, at least 1; beyond it requests are decided at once."`
	MaxBody            int64         `default:"65536" help:"Largest request body in bytes, at least 1."`
	Idempotency        time.Duration `default:"5m" help:"How long a request_id's answer is remembered (positive)."`
	ReceiptWindow      time.Duration `name:"lease-window" default:"10m" help:"How long a check's receipt is kept for /v1/settle, and an Envoy request path's envoy_settle booking (positive; a receipt record holding in-flight slots is kept until they expire)."`
	AuthListen         string        `help:"Also serve forward-auth (/v1/auth) alone on this address, for a proxy that must reach a port of its own (policy mode)."`
	AuthListenTLSCert  string        `name:"auth-listen-tls-cert" help:"TLS certificate file (PEM, with --auth-listen-tls-key) of --auth-listen; without it --auth-listen serves --tls-cert's." type:"path"`
	AuthListenTLSKey   string        `name:"auth-listen-tls-key" help:"TLS key file (PEM) of --auth-listen-tls-cert." type:"path"`
	AuthListenClientCA string        `name:"auth-listen-client-ca" help:"CA certificates (PEM): every connection to --auth-listen must present a client certificate they sign, the credential there instead of --auth-token-file's token." type:"path"`
	Shadow             bool          `help:"Shadow mode for every limit: evaluated and counted as if enforced, never refusing (answers carry shadow_refused; metrics result=\"shadow_rejected\")."`
	TopKeys            int           `default:"100" help:"Counters per limit for the heaviest keys (/v1/top, sluice top) over the last 15 minutes; 0: not kept."`
	MaxReceipts        int           `default:"1000000" help:"Most receipts kept for /v1/settle, at least 1; beyond it the oldest are dropped (settle answers 404 receipt_dropped; counted in sluice_receipts_dropped_total)."`
	Reload             time.Duration `default:"1s" help:"How often the policy file (or --envoy-config directory) is checked for changes; 0: not watched (SIGHUP still reloads)."`
	Store              string        `default:"memory" help:"Where limit state lives: memory (this process), redis://[user:password@]host:port[/db], rediss://... (TLS), or redis+cluster://host1:port,host2:port,... (Redis Cluster)."`
	StorePrefix        string        `default:"sluice:" help:"Prefix of every Redis key (no braces)."`
	StorePoolSize      int           `help:"Redis connections per node for blocking calls (0: rueidis' default; decisions are pipelined whatever it is)."`
	StoreTimeout       time.Duration `default:"250ms" help:"Bound on every Redis call (positive); a slow Redis never holds a request longer."`
	LeaseTokens        bool          `help:"Lease batches of tokens per hot key from Redis and spend them locally (far fewer round trips; never over-admits; unspent tokens return after --lease-ttl)."`
	LeaseTTL           time.Duration `name:"lease-ttl" default:"1s" help:"How long leased tokens may be spent locally before the rest returns to Redis (positive)."`
	RefusalCache       int           `name:"refusal-cache" default:"100000" help:"Most refusals from Redis kept in process and answered again without a Redis call until their retry_after (never admits more; 0: off). No effect with --store memory."`
	OnStoreError       string        `default:"fail_open" enum:"fail_open,fail_closed,local" help:"When Redis cannot be reached: fail_open admits, fail_closed refuses (503), local enforces each limit in process with its budget divided by --instances. A limit's on_store_error overrides it."`
	Instances          int           `default:"1" help:"Instances sharing the budget, at least 1 (divides budgets under --on-store-error local)."`
	ReadyRequiresStore bool          `help:"/readyz answers 503 whenever Redis cannot be reached (without it, 200 \"degraded\" unless a limit in force fails closed)."`
	LogLevel           string        `default:"info" enum:"debug,info,warn,error" help:"Least severe log records written: debug, info, warn or error."`
	LogFormat          string        `default:"json" enum:"json,text" help:"Log records on stderr: json (one object a line) or text (key=value)."`
	overrideFlags      `embed:""`
	otelFlags          `embed:""`
	usageFlags         `embed:""`
	alertFlags         `embed:""`

	rl *rlHooks // what `sluice ratelimit` adds (ratelimit.go); nil for serve
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
	case c.EnvoyConfig != "" && c.AuthListen != "":
		return errors.New("--auth-listen serves forward-auth from a policy's request_descriptors: it needs --config, not --envoy-config")
	}
	if err := c.validateAuthTLS(); err != nil {
		return err
	}
	if err := c.validateOverrides(); err != nil {
		return err
	}
	if err := c.validateUsage(); err != nil {
		return err
	}
	if err := c.validateAlerts(); err != nil {
		return err
	}
	for _, x := range []struct {
		bad   bool
		flag  string
		value any
		want  string
	}{
		{c.MaxKeys < 1, "--max-keys", c.MaxKeys, "must be at least 1"},
		{c.TopKeys < 0 || c.TopKeys > 10000, "--top-keys", c.TopKeys, "must be 0 (off) to 10000"},
		{c.MaxWait < 0, "--max-wait", c.MaxWait, "must be 0 (no waiting) or more"},
		{c.MaxWaiting < 1, "--max-waiting", c.MaxWaiting, "must be at least 1"},
		{c.MaxBody < 1, "--max-body", c.MaxBody, "must be at least 1"},
		{c.Idempotency <= 0, "--idempotency", c.Idempotency, "must be positive"},
		{c.ReceiptWindow <= 0, "--lease-window", c.ReceiptWindow, "must be positive"},
		{c.MaxReceipts < 1, "--max-receipts", c.MaxReceipts, "must be at least 1"},
		{c.Reload < 0, "--reload", c.Reload, "must be 0 (no file watching) or more"},
		{c.StorePoolSize < 0, "--store-pool-size", c.StorePoolSize, "must be 0 (rueidis' default) or more"},
		{c.StoreTimeout <= 0, "--store-timeout", c.StoreTimeout, "must be positive"},
		{c.LeaseTTL <= 0, "--lease-ttl", c.LeaseTTL, "must be positive"},
		{c.RefusalCache < 0, "--refusal-cache", c.RefusalCache, "must be 0 (off) or more"},
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
	s := &service{c: c, log: log}
	if err := s.loadConfig(); err != nil {
		return err
	}
	tokens, err := c.authTokens()
	if err != nil {
		return err
	}
	if s.ov.adminTokens, err = c.adminTokens(); err != nil {
		return err
	}
	tlsCfg, err := c.loadTLS()
	if err != nil {
		return err
	}
	authTLS, err := c.loadAuthTLS(tlsCfg)
	if err != nil {
		return err
	}
	reg := s.registry()
	if err := s.startOTel(reg); err != nil {
		return err
	}
	defer s.stopOTel() // (after the servers have drained: their last spans are flushed)
	if s.usage, err = s.startUsage(reg); err != nil {
		return err
	}
	defer s.stopUsage() // (after the drain: the interval in progress is exported)
	st, shared, err := c.openStore(log, reg)
	if err != nil {
		return usageError{err} // exit 2: the store's settings cannot work
	}
	st = s.traceStore(st, shared.failover, c.OnStoreError)
	// Until the servers run, a failure only has the store to close.
	started := false
	defer func() {
		if !started {
			st.Close()
		}
	}()
	if err := s.openOverrides(shared); err != nil {
		return err
	}
	defer s.stopOverrides() // (after the servers have drained)
	srv, err := s.newServer(st, shared, reg, tokens)
	if err != nil {
		return err
	}
	s.srv = srv
	ln, gln, err := c.listen()
	if err != nil {
		return err
	}
	var aln net.Listener
	if c.AuthListen != "" && s.p != nil && len(s.p.Request) == 0 {
		return fmt.Errorf("--auth-listen serves forward-auth, which reads descriptors by the policy's request_descriptors: %s has none", c.Config)
	}
	if c.AuthListen != "" {
		if aln, err = net.Listen("tcp", c.AuthListen); err != nil {
			ln.Close()
			if gln != nil {
				gln.Close()
			}
			return fmt.Errorf("--auth-listen %s: %w", c.AuthListen, err)
		}
	}
	// Signals are caught from here on: a SIGTERM once "serving" is logged
	// always drains.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(stop)
	defer signal.Stop(hup)

	started = true
	h := srv.Handler()
	if c.rl != nil {
		h = c.rl.handler(s, h)
	}
	run, grpcAddr := s.start(st, h, ln, gln, tlsCfg)
	if c.rl != nil {
		if err := c.rl.start(s, run); err != nil {
			run.stopAll()
			return err
		}
		defer c.rl.stop()
	}
	s.startOverrideSync(srv)
	authAddr := ""
	if aln != nil {
		authAddr = aln.Addr().String()
		h := srv.AuthHandler()
		if c.AuthListenClientCA != "" {
			h = srv.AuthHandlerClientCert()
		}
		run.serveAuth(s.c, h, aln, authTLS, s.log)
	}
	s.logServing(ln.Addr().String(), grpcAddr, authAddr, tlsCfg != nil, shared.name)
	var tick <-chan time.Time
	if c.Reload > 0 {
		t := time.NewTicker(c.Reload)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case err := <-run.errc:
			run.stopAll()
			return err
		case <-hup:
			s.reload("SIGHUP")
		case <-tick:
			s.reload("file change")
		case sig := <-stop:
			return run.drain(log, sig)
		}
	}
}

// start serves HTTP on ln and, with gln, gRPC (the Envoy service of the
// configuration in force); it returns what runs and the gRPC address.
func (s *service) start(st store.Store, h http.Handler, ln net.Listener, gln *quietListener, tlsCfg *tls.Config) (*running, string) {
	run := &running{st: st, fresh: &freshConns{m: map[net.Conn]struct{}{}, ln: ln}, gln: gln, errc: make(chan error, 3)}
	run.hs = s.c.httpServer(h, tlsCfg, run.fresh, s.log)
	go func() {
		if tlsCfg != nil {
			run.errc <- run.hs.ServeTLS(ln, "", "") // the certificate is in TLSConfig
		} else {
			run.errc <- run.hs.Serve(ln)
		}
	}()
	grpcAddr := ""
	if gln != nil {
		var impl rls.RateLimitServiceServer
		if s.p == nil {
			s.svc = envoyrls.NewService(s.envoy.Load().cfg, st)
			s.svc.SetSettleBook(s.settle)
			if err := s.svc.Register(s.reg); err != nil {
				s.log.Error("metrics: the Envoy service's decisions are not counted", "error", err)
			}
			if s.c.rl != nil {
				s.c.rl.service(s)
			}
			impl = s.svc
		} else {
			ps := envoyrls.NewPolicyService(s.lim)
			ps.SetSettleBook(s.settle)
			impl = ps
		}
		var opts []grpc.ServerOption
		if s.c.rl != nil {
			opts = s.c.rl.grpcOpts
		}
		run.gs = newGRPC(impl, append(opts, s.grpcOptions()...)...)
		grpcAddr = gln.Addr().String()
		go func() { run.errc <- run.gs.Serve(gln) }()
	}
	return run, grpcAddr
}

// service is what serve's Run holds while it serves: the configuration in
// force (a policy, or an Envoy configuration), what it was read from, and
// the reload counters.
type service struct {
	c                     serveCmd
	log                   *slog.Logger
	p                     *policy.Policy // nil in Envoy-config mode
	envoy                 atomic.Pointer[envoyState]
	last                  []byte // what the configuration in force was read from
	lastReadErr           string
	skipped               prometheus.Counter // sluice_config_files_skipped_total (the Envoy modes; nil with --config)
	lim                   *limiter.Limiter
	svc                   *envoyrls.Service
	reloads, reloadErrors prometheus.Counter
	lastReload            atomic.Pointer[reloadInfo]
	reg                   *prometheus.Registry // /metrics's
	ov                    overrideState        // policy mode's overrides
	otel                  *otelState           // --otel's; nil without
	srv                   *server.Server       // the HTTP service (its audit log)
	usage                 *usage               // --usage-export's; nil without
	settle                book.Book            // the gRPC modes' envoy_settle bookings (serve_settle.go)
}

// loadConfig reads --config or --envoy-config.
func (s *service) loadConfig() error {
	c := s.c
	if c.Config != "" {
		p, err := policy.Load(c.Config)
		if err != nil {
			return err
		}
		if s.ov.fromPolicy, err = readPolicyOverrides(p); err != nil {
			return err
		}
		s.p, s.last = p, p.Source
		return nil
	}
	s.skipped = newSkippedCounter() // (registry registers it)
	if c.rl != nil {
		return s.loadRatelimit()
	}
	s.last = envoyDigest(c.EnvoyConfig)
	cfg, err := s.loadEnvoyDir()
	if err != nil {
		return envoyDirError(c.EnvoyConfig, err)
	}
	s.envoy.Store(&envoyState{cfg: cfg, version: digestVersion(s.last)})
	return nil
}

// registry is the Prometheus registry of /metrics, with the Go and
// process collectors and the reload counters.
func (s *service) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.reloads = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_config_reloads_total",
		Help: "Reloads of the policy (or Envoy configuration) that took effect."})
	s.reloadErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_config_reload_errors_total",
		Help: "Reloads rejected (the file unreadable or invalid); the configuration in force stays."})
	reg.MustRegister(s.reloads, s.reloadErrors)
	if s.skipped != nil {
		reg.MustRegister(s.skipped)
	}
	s.reg = reg
	return reg
}

// newServer makes the limiter (policy mode) and the HTTP/JSON server.
func (s *service) newServer(st store.Store, shared sharedStore, reg *prometheus.Registry, tokens []server.Token) (*server.Server, error) {
	c := s.c
	var keys *server.Keys
	if s.p != nil {
		keys = server.NewKeys(c.TopKeys)
		opts := []limiter.Option{limiter.WithLogger(s.log), limiter.WithRegisterer(reg), limiter.WithKeyObserver(keyObservers(keys, s.usage))}
		if c.Shadow {
			opts = append(opts, limiter.WithShadow())
		}
		if s.ov.set != nil {
			opts = append(opts, limiter.WithOverrides(s.ov.set)) // (the Set /v1/overrides changes)
		}
		var err error
		if s.lim, err = limiter.New(s.p, st, opts...); err != nil {
			return nil, err
		}
	}
	bookCfg := book.Config{IdempotencyWindow: c.Idempotency, ReceiptWindow: c.ReceiptWindow, MaxReceipts: c.MaxReceipts}
	var bk book.Book
	if shared.redis != nil {
		// Bounded by --store-timeout and following the failover circuit:
		// kept in process while Redis is unreachable.
		bk = failover.NewBook(shared.failover, redisstore.NewBook(shared.redis, bookCfg), bookCfg)
	}
	if s.c.GRPC != "" {
		s.settle = s.settleBook(shared)
	}
	cfg := server.Config{
		Limiter: s.lim, Gatherer: reg, Registerer: reg, AuthTokens: tokens, MaxBodyBytes: c.MaxBody, MaxWait: c.MaxWait, NoWait: c.MaxWait == 0,
		MaxWaiting: c.MaxWaiting, IdempotencyWindow: c.Idempotency, ReceiptWindow: c.ReceiptWindow, MaxReceipts: c.MaxReceipts,
		Book: bk, Logger: s.log, Ready: shared.ready, ReadyRequiresStore: c.ReadyRequiresStore, Keys: keys,
		Tracer: s.tracer(), Audit: s.auditStore(shared), Instance: instanceName(c.HTTP),
	}
	if shared.ready != nil {
		cfg.StoreMode = c.OnStoreError
	}
	cfg.Status = s.status(st, shared)
	s.overrideConfig(&cfg)
	var err error
	if cfg.Alerts, err = s.alertConfig(shared); err != nil {
		return nil, err
	}
	if s.p == nil {
		cfg.EnvoyPolicy = func() any {
			es := s.envoy.Load()
			return envoyPolicy{Version: es.version, Source: c.EnvoyConfig, Domains: es.cfg.Summary()}
		}
	}
	return server.New(cfg)
}

// status is /v1/stats's "status": the store (its name, whether it answers,
// the keys it holds when it can tell) and the last reload.
func (s *service) status(st store.Store, shared sharedStore) func() any {
	return func() any {
		out := map[string]any{"store": shared.name, "store_ok": true, "reload": s.lastReload.Load()}
		if shared.ready != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := shared.ready(ctx); err != nil {
				out["store_ok"], out["store_error"] = false, err.Error()
			}
			cancel()
			out["on_store_error"] = s.c.OnStoreError
		}
		if sr, ok := st.(store.StatsReporter); ok {
			out["keys"] = sr.Stats().Keys
		}
		return out
	}
}

// listen listens on --http and --grpc (when given) before anything serves.
func (c serveCmd) listen() (net.Listener, *quietListener, error) {
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return nil, nil, fmt.Errorf("--http %s: %w", c.HTTP, err)
	}
	if c.GRPC == "" {
		return ln, nil, nil
	}
	l, err := net.Listen("tcp", c.GRPC)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("--grpc: %w", err)
	}
	return ln, newQuietListener(l), nil
}

// httpServer is the HTTP server: bounded reads and writes, so that a slow
// client cannot hold a connection forever (writes allow for requests held
// up to --max-wait).
func (c serveCmd) httpServer(h http.Handler, tlsCfg *tls.Config, fresh *freshConns, log *slog.Logger) *http.Server {
	return &http.Server{Handler: fresh.closing(h), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: satAdd(c.MaxWait, 30*time.Second), IdleTimeout: 2 * time.Minute, TLSConfig: tlsCfg,
		ConnState: fresh.track,
		// net/http's own messages (a TLS handshake that failed, ...) are
		// records of the structured log, not lines of plain text.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// logServing logs the startup line.
func (s *service) logServing(httpAddr, grpcAddr, authAddr string, tlsOn bool, storeName string) {
	common := []any{"http", httpAddr, "grpc", grpcAddr, "tls", tlsOn, "version", versionString(), "store", storeName}
	if authAddr != "" {
		common = append(common, "auth", authAddr, "auth_tls", tlsOn || s.c.AuthListenTLSCert != "",
			"auth_client_cert", s.c.AuthListenClientCA != "")
	}
	if s.p != nil {
		s.log.Info("sluice serving", append(common, "policy", s.c.Config, "policy_version", s.p.Version, "limits", len(s.p.Limits))...)
		return
	}
	es := s.envoy.Load()
	s.log.Info("sluice serving", append(common, "envoy_config", s.c.EnvoyConfig, "policy_version", es.version, "domains", len(es.cfg.Domains))...)
}

// sharedStore is what serve needs to know of a shared store.
type sharedStore struct {
	name     string                          // for the log: "memory" or the URL without password
	redis    *redisstore.Store               // nil in memory
	failover *failover.Store                 // nil in memory
	ready    func(ctx context.Context) error // nil in memory
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
	if reg != nil {
		if err := reg.Register(redisErrors{rs}); err != nil {
			rs.Close()
			return nil, sharedStore{}, err
		}
	}
	var primary store.Store = rs
	if primary, err = c.refusalCache(rs, reg); err != nil { // (under leasing and failover: serve_store.go)
		rs.Close()
		return nil, sharedStore{}, err
	}
	if c.LeaseTokens {
		primary = lease.New(primary, lease.WithTTL(c.LeaseTTL))
	}
	fo, err := failover.New(failover.Config{Primary: primary, Mode: c.OnStoreError, Instances: c.Instances,
		Timeout: c.StoreTimeout, MaxKeys: c.MaxKeys, Logger: log, Registerer: reg})
	if err != nil {
		rs.Close()
		return nil, sharedStore{}, err
	}
	// Find out now whether Redis answers: if not, the instance starts
	// degraded (logged, gauge set) and returns to Redis when it answers.
	ctx, cancel := context.WithTimeout(context.Background(), c.StoreTimeout)
	fo.Ping(ctx)
	cancel()
	return fo, sharedStore{name: redisstore.Redact(c.Store), redis: rs, failover: fo, ready: fo.Ping}, nil
}
