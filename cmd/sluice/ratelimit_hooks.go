// What `sluice ratelimit` adds to serve's Envoy mode: the reference's config directory, endpoints and listeners.

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/envoyrls"
)

// rlHooks is what `sluice ratelimit` adds to serve (serveCmd.rl).
type rlHooks struct {
	rs       *rlSettings
	xds      bool
	grpcOpts []grpc.ServerOption
	servers  []*http.Server
	cancel   context.CancelFunc
	wait     func() error
	svc      atomic.Pointer[envoyrls.Service]
	log      *slog.Logger       // serve's (loadRatelimit sets it before the first load)
	skipped  prometheus.Counter // serve's sluice_config_files_skipped_total (loadRatelimit sets it)
}

func newRLHooks(rs *rlSettings) *rlHooks {
	h := &rlHooks{rs: rs, xds: rs.xds, grpcOpts: rs.grpcOptions(), log: slog.Default(), skipped: newSkippedCounter()}
	if h.xds && !rs.force {
		h.grpcOpts = append(h.grpcOpts, grpc.ChainUnaryInterceptor(h.untilConfigured))
	}
	return h
}

// untilConfigured answers the RateLimitService UNAVAILABLE until the xDS
// server's first snapshot is in force (CONFIG_TYPE=GRPC_XDS_SOTW without
// FORCE_START_WITHOUT_INITIAL_CONFIG=true): where the reference does not
// serve yet, Envoy then applies its failure_mode_deny as it does to a
// service it cannot reach.
func (h *rlHooks) untilConfigured(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, "/envoy.service.ratelimit.") && !h.configured() {
		return nil, envoyrls.NotConfigured("no rate-limit configuration yet: waiting for the xDS server's first snapshot (FORCE_START_WITHOUT_INITIAL_CONFIG is not true)")
	}
	return next(ctx, req)
}

// configured reports whether the xDS server's first snapshot is in force.
func (h *rlHooks) configured() bool {
	svc := h.svc.Load()
	if svc == nil {
		return false
	}
	select {
	case <-svc.Configured():
		return true
	default:
		return false
	}
}

// files lists the configuration's files as the reference's runtime loader
// reads them: every file under the configuration directory, at any depth,
// sorted by path; a symbolic link to a file is followed, one to a
// directory is not; with RUNTIME_IGNOREDOTFILES=true, names starting with
// "." are left out. Names starting with ".." (Kubernetes' atomic-writer
// internals, whose files the visible names link to) are always left out.
// Other entries that are not files it can read are skipped, as the
// reference's loader skips them, and returned in skipped with why.
func (h *rlHooks) files() (files []string, skipped []envoyrls.Skipped, err error) {
	dir := h.rs.configDir
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("configuration directory (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY): %w", err)
	}
	if !fi.IsDir() {
		return nil, nil, fmt.Errorf("configuration directory (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY) %s is a file", dir)
	}
	var out []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && p == dir:
			return err
		case err != nil: // (a directory that cannot be read)
			skipped = append(skipped, envoyrls.Skipped{Path: p, Err: err})
			return nil
		case p == dir:
			return nil
		case strings.HasPrefix(d.Name(), "..") || h.rs.ignoreDot && strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return nil
		default:
			if err := envoyrls.NotRegular(p, d); err != nil {
				skipped = append(skipped, envoyrls.Skipped{Path: p, Err: err})
				return nil
			}
		}
		out = append(out, p)
		return nil
	})
	sort.Strings(out)
	return out, skipped, err
}

// digest hashes the configuration's files (names and contents), to notice
// changes, a swapped symbolic link included.
func (h *rlHooks) digest() []byte {
	files, _, err := h.files()
	if err != nil {
		sum := sha256.Sum256([]byte("error " + err.Error()))
		return sum[:]
	}
	return filesDigest(files)
}

// load reads the configuration's files; none is an empty configuration.
// Each entry skipped is logged (a warning "runtime config entry skipped"
// with "path" and "error", as the reference warns of it) and counted.
func (h *rlHooks) load() (*envoyrls.Config, error) {
	files, skipped, err := h.files()
	noteSkipped(h.log, h.skipped, "runtime config entry skipped", skipped)
	if err != nil {
		return nil, err
	}
	return envoyrls.LoadFiles(files)
}

// loadRatelimit is serve's loadConfig in this mode: the files (an error
// stops the start unless FORCE_START_WITHOUT_INITIAL_CONFIG=true), or with
// xDS an empty configuration until the first snapshot.
func (s *service) loadRatelimit() error {
	h := s.c.rl
	h.log, h.skipped = s.log, s.skipped
	for _, w := range h.rs.warnings {
		s.log.Warn("environment variable not in effect", "variable", w.variable, "reason", w.reason)
	}
	empty := &envoyrls.Config{Domains: map[string]*envoyrls.Node{}}
	if h.xds {
		s.envoy.Store(&envoyState{cfg: empty, version: "xds"})
		return nil
	}
	s.last = h.digest()
	cfg, err := h.load()
	if err != nil {
		if !h.rs.force {
			return err
		}
		s.log.Warn("no configuration loaded; starting without (FORCE_START_WITHOUT_INITIAL_CONFIG=true)", "error", err)
		cfg = empty
	}
	s.envoy.Store(&envoyState{cfg: cfg, version: digestVersion(s.last)})
	return nil
}

// service is called once the Envoy service exists, before it serves.
func (h *rlHooks) service(s *service) {
	h.svc.Store(s.svc)
	if !h.rs.stats {
		return
	}
	if err := s.svc.RegisterReference(s.reg); err != nil {
		s.log.Error("metrics: the reference's metric names are not exported", "error", err)
		return
	}
	if !h.xds {
		s.svc.NoteConfigLoad(nil) // the files read at the start
	}
}

// handler adds the reference's HTTP endpoints to serve's: /healthcheck
// and /json.
func (h *rlHooks) handler(s *service, inner http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if h.healthy(s, inner, r) {
			w.Write([]byte("OK"))
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		var req rls.RateLimitRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.c.MaxBody))
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		svc := h.svc.Load()
		if svc == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		var resp *rls.RateLimitResponse
		if err == nil {
			resp, err = svc.ShouldRateLimit(r.Context(), &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, _ := protojson.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rls.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
	mux.Handle("/", inner)
	return mux
}

// healthy is /healthcheck's answer: serve's /readyz is 200 (with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true, Redis answers); over xDS
// without FORCE_START_WITHOUT_INITIAL_CONFIG=true, the first snapshot is
// in force; with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true, a
// configuration with a domain is.
func (h *rlHooks) healthy(s *service, inner http.Handler, r *http.Request) bool {
	rec := &statusOnly{header: http.Header{}}
	rr := r.Clone(r.Context())
	rr.URL.Path, rr.Method = "/readyz", http.MethodGet
	inner.ServeHTTP(rec, rr)
	// Redis out of reach fails /healthcheck only with
	// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true, as in the reference; the
	// calls meanwhile answer by the on_store_error mode.
	if rec.code != 0 && rec.code != http.StatusOK && (h.rs.redisHealth || !bytes.Contains(rec.body, []byte(`"code":"store_`))) {
		return false
	}
	if h.xds && !h.rs.force && !h.configured() {
		return false
	}
	if h.rs.healthyOne {
		svc := h.svc.Load()
		return svc != nil && len(svc.Config().Domains) > 0
	}
	return true
}

// statusOnly is a ResponseWriter keeping the status and the first 4 KiB
// of the body.
type statusOnly struct {
	header http.Header
	code   int
	body   []byte
}

func (w *statusOnly) Header() http.Header { return w.header }
func (w *statusOnly) Write(b []byte) (int, error) {
	if n := min(len(b), 4096-len(w.body)); n > 0 {
		w.body = append(w.body, b[:n]...)
	}
	return len(b), nil
}
func (w *statusOnly) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// start listens on DEBUG_PORT and (USE_PROMETHEUS=true) PROMETHEUS_ADDR
// and starts the xDS client, once serve's servers serve.
func (h *rlHooks) start(s *service, run *running) error {
	debug := http.NewServeMux()
	endpoints := map[string]string{
		"/rlconfig":              "print out the currently loaded configuration for debugging",
		"/stats":                 "print out stats (Prometheus text)",
		"/debug/pprof/":          "root of various pprof endpoints. hit for help.",
		"/debug/pprof/profile":   "CPU profiling endpoint",
		"/debug/pprof/trace":     "trace endpoint",
		"/debug/pprof/symbol":    "symbol lookup",
		"/debug/pprof/cmdline":   "the command line",
		"/debug/pprof/goroutine": "goroutines (also heap, allocs, block, mutex...)",
	}
	debug.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, dumpConfig(h.svc.Load().Config()))
	})
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	debug.Handle("/stats", metrics)
	debug.HandleFunc("/debug/pprof/", pprof.Index)
	debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
	debug.HandleFunc("/debug/pprof/trace", pprof.Trace)
	debug.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	debug.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	debug.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		keys := make([]string, 0, len(endpoints))
		for k := range endpoints {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s: %s\n", k, endpoints[k])
		}
	})
	if err := h.listen(s, "DEBUG_PORT", h.rs.debugAddr, debug, run); err != nil {
		return err
	}
	if h.rs.usePrometheus {
		prom := http.NewServeMux()
		prom.Handle(h.rs.promPath, metrics)
		if err := h.listen(s, "PROMETHEUS_ADDR", h.rs.promAddr, prom, run); err != nil {
			h.stop()
			return err
		}
	}
	if !h.xds {
		return nil
	}
	// Serving already: the first snapshot is waited for by /healthcheck
	// and untilConfigured, not by holding the start (a SIGTERM meanwhile
	// is served as ever).
	getenv := func(k string) string {
		if k == "FORCE_START_WITHOUT_INITIAL_CONFIG" {
			return "true"
		}
		return h.rs.getenv(k)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := startXDS(ctx, getenv, s.svc, s.log)
	if err != nil {
		cancel()
		h.stop()
		return err
	}
	h.cancel, h.wait = cancel, wait
	return nil
}

// listen serves handler on addr (named by the variable what), reporting
// a server that stops on its own to run.
func (h *rlHooks) listen(s *service, what, addr string, handler http.Handler, run *running) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s (%s): %w", what, addr, err)
	}
	hs := s.c.httpServer(handler, nil, &freshConns{m: map[net.Conn]struct{}{}, ln: ln}, s.log)
	h.servers = append(h.servers, hs)
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case run.errc <- fmt.Errorf("%s: %w", what, err):
			default:
			}
		}
	}()
	s.log.Info("listening", "for", what, "addr", ln.Addr().String())
	return nil
}

// stop closes the debug and metrics listeners and stops the xDS client.
func (h *rlHooks) stop() {
	for _, hs := range h.servers {
		hs.Close()
	}
	h.servers = nil
	if h.cancel != nil {
		h.cancel()
		if err := h.wait(); err != nil && !errors.Is(err, context.Canceled) {
			slog.Default().Debug("xds client stopped", "error", err)
		}
		h.cancel = nil
	}
}

// dumpConfig is /rlconfig: each limit as the reference prints it,
// "DOMAIN.KEY_VALUE...: unit=U requests_per_unit=N, shadow_mode: B,
// quota_mode: B", sorted.
func dumpConfig(c *envoyrls.Config) string {
	var lines []string
	var walk func(prefix string, nodes []*envoyrls.Node)
	walk = func(prefix string, nodes []*envoyrls.Node) {
		for _, n := range nodes {
			key := prefix + "." + n.Key
			if n.Value != "" {
				key += "_" + n.Value
			}
			if l := n.Limit; l != nil {
				lines = append(lines, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t",
					key, l.Unit, l.RequestsPerUnit, n.Shadow, n.Quota))
			}
			walk(key, n.Children)
		}
	}
	for d, root := range c.Domains {
		walk(d, root.Children)
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
