// sluice ratelimit: a drop-in for envoyproxy/ratelimit, configured by its environment variables.

package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/store"
)

// ratelimitCmd runs serve's Envoy mode configured as envoyproxy/ratelimit
// is, by its environment variables (docs/envoy.md lists each); it takes
// no flags of its own.
type ratelimitCmd struct{}

func (ratelimitCmd) Run(e *env) error {
	c, err := ratelimitServe(os.Getenv)
	if err != nil {
		return usageError{err}
	}
	if c.OTel {
		if err := setRLTracingEnv(); err != nil {
			return usageError{err}
		}
	}
	return c.Run(e)
}

// rlSettings is what the environment asks for, as serve runs it.
type rlSettings struct {
	getenv                             func(string) string
	xds, force, ignoreDot, healthyOne  bool
	redisHealth                        bool // REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
	usePrometheus                      bool
	promAddr, promPath, debugAddr      string
	configDir                          string // RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
	stats                              bool   // the reference's metric names (DISABLE_STATS unset)
	grpcTLS                            *tls.Config
	grpcMaxConnAge, grpcMaxConnAgeGrce time.Duration
	warnings                           []rlWarning // variables set that sluice does not act on (ratelimit_redisenv.go)
}

// envReader reads variables, collecting every problem (each naming its
// variable).
type envReader struct {
	get  func(string) string
	errs []error
}

func (r *envReader) str(name, def string) string {
	if v := r.get(name); v != "" {
		return v
	}
	return def
}

func (r *envReader) boolean(name string, def bool) bool {
	v := r.get(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: not true or false", name, v))
	}
	return b
}

func (r *envReader) port(name string, def int) string {
	v := r.get(name)
	if v == "" {
		return strconv.Itoa(def)
	}
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: not a port (0 to 65535)", name, v))
	}
	return v
}

func (r *envReader) duration(name string, def time.Duration) time.Duration {
	v := r.get(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: not a positive duration (10s, 1m...)", name, v))
	}
	return d
}

// refuse stops the start when name is set to something other than the
// values sluice honours (ok; none: any value is refused).
func (r *envReader) refuse(name, why string, ok ...string) {
	v := r.get(name)
	if v == "" {
		return
	}
	for _, o := range ok {
		if strings.EqualFold(v, o) {
			return
		}
	}
	r.errs = append(r.errs, fmt.Errorf("%s=%q: %s", name, v, why))
}

// refuseTrue stops the start when the boolean name is true.
func (r *envReader) refuseTrue(name, why string) {
	if r.boolean(name, false) {
		r.errs = append(r.errs, fmt.Errorf("%s=true: %s", name, why))
	}
}

// ratelimitServe is the serve command the environment (getenv) asks for,
// with its hooks; every variable set to what sluice cannot honour is an
// error naming it.
func ratelimitServe(getenv func(string) string) (serveCmd, error) {
	r := &envReader{get: getenv}
	rs := &rlSettings{getenv: getenv}
	args := []string{"serve"}
	arg := func(flag, v string) { args = append(args, "--"+flag+"="+v) }

	arg("http", net.JoinHostPort(r.str("HOST", "0.0.0.0"), r.port("PORT", 8080)))
	arg("grpc", net.JoinHostPort(r.str("GRPC_HOST", "0.0.0.0"), r.port("GRPC_PORT", 8081)))
	rs.debugAddr = net.JoinHostPort(r.str("DEBUG_HOST", "0.0.0.0"), r.port("DEBUG_PORT", 6070))
	r.refuse("GRPC_UDS", "sluice serves gRPC on TCP only (GRPC_HOST, GRPC_PORT)")

	switch lvl := strings.ToLower(r.str("LOG_LEVEL", "warn")); lvl {
	case "trace", "debug":
		arg("log-level", "debug")
	case "info":
		arg("log-level", "info")
	case "warn", "warning":
		arg("log-level", "warn")
	case "error", "fatal", "panic":
		arg("log-level", "error")
	default:
		r.errs = append(r.errs, fmt.Errorf("LOG_LEVEL=%q: not trace, debug, info, warn, error, fatal or panic", lvl))
	}
	if strings.EqualFold(r.get("LOG_FORMAT"), "json") {
		arg("log-format", "json")
	} else {
		arg("log-format", "text") // the reference's default; any value but json is text there too
	}

	// Statistics: sluice exports Prometheus metrics, never statsd.
	r.refuseTrue("USE_STATSD", "sluice does not send statsd; set USE_STATSD=false and USE_PROMETHEUS=true (the reference's metric names on PROMETHEUS_ADDR)")
	r.refuseTrue("USE_DOG_STATSD", "sluice does not send statsd")
	rs.stats = !r.boolean("DISABLE_STATS", false)
	rs.usePrometheus = r.boolean("USE_PROMETHEUS", false)
	rs.promAddr = r.str("PROMETHEUS_ADDR", ":9090")
	rs.promPath = r.str("PROMETHEUS_PATH", "/metrics")
	if !strings.HasPrefix(rs.promPath, "/") {
		r.errs = append(r.errs, fmt.Errorf("PROMETHEUS_PATH=%q: must start with /", rs.promPath))
	}
	if p := r.get("PROMETHEUS_MAPPER_YAML"); p != "" {
		if err := checkMapperYAML(p); err != nil {
			r.errs = append(r.errs, err)
		}
	}
	r.refuseTrue("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "sluice exports response times in seconds")
	r.refuse("NEAR_LIMIT_RATIO", "sluice's near_limit uses the reference's default ratio only", "0.8")

	rs.readRuntime(r)
	args = rs.readStore(r, args)
	rs.readGRPCTLS(r)
	rs.grpcMaxConnAge = r.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	rs.grpcMaxConnAgeGrce = r.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour)
	rs.healthyOne = r.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	rs.redisHealth = r.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)

	// Behaviours of the reference that sluice does not have.
	r.refuseTrue("SHADOW_MODE", "sluice has no global shadow mode in this mode (shadow_mode per descriptor is honoured)")
	r.refuseTrue("QUOTA_MODE", "sluice has no global quota mode (quota_mode per descriptor is honoured)")
	r.refuseTrue("LIMIT_RESPONSE_HEADERS_ENABLED", "sluice answers the IETF RateLimit and RateLimit-Policy headers instead of RateLimit-Limit/-Remaining/-Reset")
	r.refuseTrue("RESPONSE_DYNAMIC_METADATA", "sluice returns no dynamic metadata")
	r.refuseTrue("MERGE_DOMAIN_CONFIG", "sluice refuses a domain defined in two files")
	// TRACING_ENABLED: the reference's OTLP traces are serve's --otel, its
	// TRACING_* variables read as OTEL_* ones (ratelimit_tracing.go).
	if r.boolean("TRACING_ENABLED", false) {
		if _, err := rlTracingEnv(r.get); err != nil {
			r.errs = append(r.errs, err)
		}
		arg("otel", "true")
	}
	r.refuseTrue("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "sluice never counts a refused request (this is always so)")
	// The reference's local cache of over-limit keys is sluice's refusal
	// cache (--refusal-cache): off unless LOCAL_CACHE_SIZE_IN_BYTES > 0,
	// as there, then an entry per 256 bytes. EXPIRATION_JITTER_MAX_SECONDS
	// is accepted with no effect: sluice's keys expire when their buckets
	// are full again, not at a window's end that many instances share.
	cache := 0
	if v := r.get("LOCAL_CACHE_SIZE_IN_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			r.errs = append(r.errs, fmt.Errorf("LOCAL_CACHE_SIZE_IN_BYTES=%q: not a whole number of bytes", v))
		} else if n > 0 {
			cache = max(n/256, 1)
		}
	}
	arg("refusal-cache", strconv.Itoa(cache))
	if v := r.get("EXPIRATION_JITTER_MAX_SECONDS"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			r.errs = append(r.errs, fmt.Errorf("EXPIRATION_JITTER_MAX_SECONDS=%q: not a whole number of seconds", v))
		}
	}
	// While Redis cannot be reached the reference fails the call (counted
	// as redis_error), and Envoy's failure_mode_deny decides: fail_closed
	// here, the same UNAVAILABLE. SLUICE_ON_STORE_ERROR (and
	// SLUICE_INSTANCES for local) choose another of serve's modes.
	mode := r.str("SLUICE_ON_STORE_ERROR", store.FailClosed)
	if !slices.Contains(store.ErrorModes(), mode) {
		r.errs = append(r.errs, fmt.Errorf("SLUICE_ON_STORE_ERROR=%q: not %s", mode, strings.Join(store.ErrorModes(), ", ")))
	}
	arg("on-store-error", mode)
	if v := r.get("SLUICE_INSTANCES"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			r.errs = append(r.errs, fmt.Errorf("SLUICE_INSTANCES=%q: not a whole number of at least 1", v))
		}
		arg("instances", v)
	}

	// Parse serve's flags with serve's own defaults and validation, so
	// that this mode is serve's Envoy mode and nothing else.
	if len(r.errs) > 0 {
		return serveCmd{}, errors.Join(r.errs...)
	}
	arg("envoy-config", rs.configDir)
	var cl struct {
		Serve serveCmd `cmd:""`
	}
	parser, err := kong.New(&cl, kong.Name("sluice ratelimit"), kong.Exit(func(int) {}))
	if err != nil {
		return serveCmd{}, err
	}
	if _, err := parser.Parse(args); err != nil {
		// (Not the arguments themselves: --store holds REDIS_AUTH.)
		return serveCmd{}, fmt.Errorf("serve's flags as the environment sets them: %w", err)
	}
	c := cl.Serve
	c.rl = newRLHooks(rs)
	return c, nil
}

// readRuntime reads the configuration's source: FILE (the reference's
// runtime directory) or GRPC_XDS_SOTW.
func (rs *rlSettings) readRuntime(r *envReader) {
	switch t := strings.ToUpper(r.str("CONFIG_TYPE", "FILE")); t {
	case "FILE":
	case "GRPC_XDS_SOTW":
		rs.xds = true
	default:
		r.errs = append(r.errs, fmt.Errorf("CONFIG_TYPE=%q: not FILE or GRPC_XDS_SOTW", t))
	}
	rs.force = r.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	if rs.xds {
		if _, _, err := xdsOptions(r.get); err != nil { // (checked again when the client starts)
			r.errs = append(r.errs, err)
		}
	}
	root := r.str("RUNTIME_ROOT", "/srv/runtime_data/current")
	rs.configDir = filepath.Join(root, r.get("RUNTIME_SUBDIRECTORY"), r.str("RUNTIME_APPDIRECTORY", "config"))
	rs.ignoreDot = r.boolean("RUNTIME_IGNOREDOTFILES", false)
	r.boolean("RUNTIME_WATCH_ROOT", true) // either way the directory is polled, a swapped root symlink included
}

// readStore reads the backend: Redis (REDIS_URL over TCP, single or
// cluster), or sluice's memory store when neither REDIS_URL nor
// BACKEND_TYPE is set.
func (rs *rlSettings) readStore(r *envReader, args []string) []string {
	backend := strings.ToLower(r.get("BACKEND_TYPE"))
	addr := r.get("REDIS_URL")
	rs.checkRedisEnv(r, addr != "")
	switch {
	case backend != "" && backend != "redis":
		r.errs = append(r.errs, fmt.Errorf("BACKEND_TYPE=%q: sluice stores state in Redis (redis) only", backend))
		return args
	case addr == "" && backend == "redis":
		r.errs = append(r.errs, errors.New("BACKEND_TYPE=redis needs REDIS_URL (host:port)"))
		return args
	case addr == "":
		return args // memory: one instance's state
	}
	r.refuse("REDIS_SOCKET_TYPE", "sluice connects to Redis over TCP only: set REDIS_SOCKET_TYPE=tcp", "tcp")
	// (Unset, the reference's default is unix; here REDIS_URL is a TCP
	// address whatever it says.)
	kind := strings.ToLower(r.str("REDIS_TYPE", "single"))
	if kind != "single" && kind != "cluster" {
		r.errs = append(r.errs, fmt.Errorf("REDIS_TYPE=%q: sluice supports single and cluster (not sentinel)", kind))
	}
	r.refuseTrue("REDIS_PERSECOND", "sluice keeps every limit in one Redis (REDIS_URL)")
	for _, v := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT"} {
		r.refuse(v, "sluice's Redis TLS uses the system's CA certificates and no client certificate")
	}
	r.refuseTrue("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "sluice always verifies Redis's certificate")
	u := &url.URL{Scheme: "redis"}
	if r.boolean("REDIS_TLS", false) {
		u.Scheme = "rediss"
	}
	if kind == "cluster" {
		u.Scheme += "+cluster"
	}
	if auth := r.get("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", auth)
		}
	}
	u.Host = strings.ReplaceAll(addr, " ", "")
	if strings.Contains(addr, "://") {
		u.Host = ""
		r.errs = append(r.errs, fmt.Errorf("REDIS_URL=%q: give host:port (host1:port,host2:port for a cluster), as the reference takes it", addr))
	}
	args = append(args, "--store="+u.String())
	if d := r.get("REDIS_TIMEOUT"); d != "" {
		r.duration("REDIS_TIMEOUT", 0)
		args = append(args, "--store-timeout="+d)
	}
	if n := r.get("REDIS_POOL_SIZE"); n != "" {
		args = append(args, "--store-pool-size="+n)
	}
	if p := r.get("CACHE_KEY_PREFIX"); p != "" {
		args = append(args, "--store-prefix="+p)
	}
	if r.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false) {
		args = append(args, "--ready-requires-store")
	}
	return args
}

// readGRPCTLS reads the gRPC server's TLS: GRPC_SERVER_USE_TLS with
// GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY, and client certificates
// required (mTLS) when GRPC_CLIENT_TLS_CACERT (the reference's name) or
// GRPC_SERVER_TLS_CACERT names their CA, GRPC_CLIENT_TLS_SAN the name a
// client's certificate must carry.
func (rs *rlSettings) readGRPCTLS(r *envReader) {
	if !r.boolean("GRPC_SERVER_USE_TLS", false) {
		return
	}
	certFile, keyFile := r.get("GRPC_SERVER_TLS_CERT"), r.get("GRPC_SERVER_TLS_KEY")
	if certFile == "" || keyFile == "" {
		r.errs = append(r.errs, errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
		return
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("GRPC_SERVER_TLS_CERT=%s, GRPC_SERVER_TLS_KEY=%s: %w", certFile, keyFile, err))
		return
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	caVar, caFile := "GRPC_CLIENT_TLS_CACERT", r.get("GRPC_CLIENT_TLS_CACERT")
	if caFile == "" {
		caVar, caFile = "GRPC_SERVER_TLS_CACERT", r.get("GRPC_SERVER_TLS_CACERT")
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		pool := x509.NewCertPool()
		if err == nil && !pool.AppendCertsFromPEM(pem) {
			err = errors.New("no PEM certificate in it")
		}
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s=%s: %w", caVar, caFile, err))
			return
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := r.get("GRPC_CLIENT_TLS_SAN"); san != "" {
			cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				if len(chains) > 0 && len(chains[0]) > 0 && chains[0][0].VerifyHostname(san) == nil {
					return nil
				}
				return fmt.Errorf("the client certificate does not name %s (GRPC_CLIENT_TLS_SAN)", san)
			}
		}
	}
	rs.grpcTLS = cfg
}

// grpcOptions are the gRPC server's options the environment asks for.
func (rs *rlSettings) grpcOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: rs.grpcMaxConnAge, MaxConnectionAgeGrace: rs.grpcMaxConnAgeGrce})}
	if rs.grpcTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(rs.grpcTLS)))
	}
	return opts
}
