package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
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
	Config        string        `help:"Policy file (hot-reloaded on SIGHUP and when it changes)." type:"path" xor:"config"`
	EnvoyConfig   string        `help:"Directory of Envoy ratelimit configuration files (*.yaml), served over --grpc instead of a policy." type:"path" xor:"config"`
	HTTP          string        `default:"127.0.0.1:8080" help:"Address of the HTTP/JSON API."`
	GRPC          string        `help:"Address of Envoy's RateLimitService v3 over gRPC (off unless given), serving the policy or --envoy-config."`
	AuthTokenFile string        `help:"File holding a bearer token required on /v1/ endpoints (compared in constant time)." type:"path"`
	TLSCert       string        `name:"tls-cert" help:"TLS certificate file (with --tls-key)." type:"path"`
	TLSKey        string        `name:"tls-key" help:"TLS key file." type:"path"`
	MaxKeys       int           `default:"1000000" help:"Most keys held in memory; beyond it new keys are refused (503 store_full)."`
	MaxWait       time.Duration `default:"10s" help:"Cap on a request's max_wait_ms."`
	MaxWaiting    int           `default:"1024" help:"Most requests held waiting at once; beyond it requests are decided at once."`
	MaxBody       int64         `default:"65536" help:"Largest request body in bytes."`
	Idempotency   time.Duration `default:"5m" help:"How long a request_id's answer is remembered."`
	LeaseWindow   time.Duration `default:"10m" help:"How long a check's receipt is kept for /v1/settle (a lease holding in-flight slots is kept until they expire)."`
	MaxReceipts   int           `default:"1000000" help:"Most receipts kept for /v1/settle; beyond it the oldest are dropped (settle answers 404 receipt_dropped; counted in sluice_receipts_dropped_total)."`
	Reload        time.Duration `default:"1s" help:"How often the policy file is checked for changes (0 disables; SIGHUP still reloads)."`
	Store         string        `default:"memory" help:"Where limit state lives: memory (this process), redis://[user:password@]host:port[/db], rediss://... (TLS), or redis+cluster://host1:port,host2:port,... (Redis Cluster)."`
	StorePrefix   string        `default:"sluice:" help:"Prefix of every Redis key (no braces)."`
	StorePoolSize int           `help:"Redis connections per node for blocking calls (0: rueidis' default; decisions are pipelined whatever it is)."`
	StoreTimeout  time.Duration `default:"250ms" help:"Bound on every Redis call; a slow Redis never holds a request longer."`
	LeaseTokens   bool          `help:"Lease batches of tokens per hot key from Redis and spend them locally (far fewer round trips; never over-admits; unspent tokens return after --lease-ttl)."`
	LeaseTTL      time.Duration `name:"lease-ttl" default:"1s" help:"How long leased tokens may be spent locally before the rest returns to Redis."`
	OnStoreError  string        `default:"fail_open" enum:"fail_open,fail_closed,local" help:"When Redis cannot be reached: fail_open admits, fail_closed refuses (503), local enforces each limit in process with its budget divided by --instances. A limit's on_store_error overrides it."`
	Instances     int           `default:"1" help:"Instances sharing the budget (divides budgets under --on-store-error local)."`
}

func (c serveCmd) Run(e *env) error {
	log := slog.New(slog.NewJSONHandler(e.stderr, nil))
	switch {
	case c.Config == "" && c.EnvoyConfig == "":
		return errors.New("serve needs --config (a sluice policy) or --envoy-config (Envoy's format)")
	case c.EnvoyConfig != "" && c.GRPC == "":
		return errors.New("--envoy-config is served over gRPC: give --grpc ADDR")
	}
	var p *policy.Policy
	var envoyCfg *envoyrls.Config
	var err error
	if c.Config != "" {
		if p, err = policy.Load(c.Config); err != nil {
			return err
		}
	} else if envoyCfg, err = envoyrls.LoadDir(c.EnvoyConfig); err != nil {
		return err
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
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st, shared, err := c.openStore(log, reg)
	if err != nil {
		return err
	}
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
	srv, err := server.New(server.Config{
		Limiter: lim, Gatherer: reg, Registerer: reg, AuthToken: token, MaxBodyBytes: c.MaxBody, MaxWait: c.MaxWait,
		MaxWaiting: c.MaxWaiting, IdempotencyWindow: c.Idempotency, LeaseWindow: c.LeaseWindow, MaxReceipts: c.MaxReceipts,
		Book: bk, Logger: log, Ready: shared.ready,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return err
	}
	// Bounded reads and writes: a slow client cannot hold a connection
	// forever (writes allow for requests held up to --max-wait).
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: c.MaxWait + 30*time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() {
		if c.TLSCert != "" {
			errc <- hs.ServeTLS(ln, c.TLSCert, c.TLSKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	var svc *envoyrls.Service
	grpcAddr := ""
	if c.GRPC != "" {
		var impl rls.RateLimitServiceServer
		if envoyCfg != nil {
			svc = envoyrls.NewService(envoyCfg, st)
			impl = svc
		} else {
			impl = envoyrls.NewPolicyService(lim)
		}
		gs, addr, err := startGRPC(c.GRPC, impl, errc)
		if err != nil {
			hs.Close()
			return err
		}
		defer gs.GracefulStop()
		grpcAddr = addr
	}
	if p != nil {
		log.Info("sluice serving", "http", ln.Addr().String(), "grpc", grpcAddr, "tls", c.TLSCert != "", "policy", c.Config, "version", p.Version, "limits", len(p.Limits), "store", shared.name)
	} else {
		log.Info("sluice serving", "http", ln.Addr().String(), "grpc", grpcAddr, "envoy_config", c.EnvoyConfig, "domains", len(envoyCfg.Domains))
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(stop)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if c.Reload > 0 {
		t := time.NewTicker(c.Reload)
		defer t.Stop()
		tick = t.C
	}
	var last []byte
	if p != nil {
		last = p.Source
	} else {
		last = dirDigest(c.EnvoyConfig)
	}
	reload := func(why string) {
		if envoyCfg != nil {
			d := dirDigest(c.EnvoyConfig)
			if why == "file change" && bytes.Equal(d, last) {
				return
			}
			last = d
			nc, err := envoyrls.LoadDir(c.EnvoyConfig)
			if err != nil {
				log.Error("envoy config reload rejected; the old configuration stays in force", "reason", why, "error", err)
				return
			}
			svc.SetConfig(nc)
			log.Info("envoy config reloaded", "reason", why, "domains", len(nc.Domains))
			return
		}
		src, err := os.ReadFile(c.Config)
		if err != nil {
			log.Error("policy reload failed; the old policy stays in force", "reason", why, "error", err)
			return
		}
		if why == "file change" && bytes.Equal(src, last) {
			return
		}
		last = src
		np, err := policy.Parse(src)
		if err == nil {
			err = lim.SetPolicy(np)
		}
		if err != nil {
			log.Error("policy reload rejected; the old policy stays in force", "reason", why, "error", err)
			return
		}
		log.Info("policy reloaded", "reason", why, "version", np.Version, "limits", len(np.Limits))
	}
	for {
		select {
		case err := <-errc:
			return err
		case <-hup:
			reload("SIGHUP")
		case <-tick:
			reload("file change")
		case sig := <-stop:
			log.Info("shutting down: draining in-flight requests", "signal", sig.String())
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := hs.Shutdown(ctx)
			cancel()
			st.Close()
			if err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			log.Info("stopped")
			return nil
		}
	}
}

// startGRPC serves Envoy's RateLimitService (from the policy or Envoy's
// configuration), the gRPC health service and
// reflection on addr; Serve's error goes to errc.
func startGRPC(addr string, svc rls.RateLimitServiceServer, errc chan<- error) (*grpc.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--grpc: %w", err)
	}
	// A decision request is small; a fixed set of stream workers serves RPCs
	// (no goroutine, and no stack growth, per call).
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(256<<10), grpc.NumStreamWorkers(uint32(runtime.NumCPU())))
	rls.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	go func() { errc <- gs.Serve(ln) }()
	return gs, ln.Addr().String(), nil
}

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
