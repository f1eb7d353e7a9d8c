// Package server is sluice's HTTP/JSON rate-limit service: POST /v1/check
// decides a request against the policy in force, POST /v1/release frees
// in-flight slots, and GET /healthz, /readyz, /metrics and /v1/policy
// report on the service.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/tracing"
)

// Config configures a Server. Zero values have the documented defaults.
type Config struct {
	// Limiter decides; its policy can be swapped at run time (hot reload).
	// Nil serves only /healthz, /readyz and /metrics (Envoy-config mode).
	Limiter *limiter.Limiter
	// Gatherer serves /metrics; nil serves the default registry.
	Gatherer prometheus.Gatherer
	// Registerer registers the server's own metrics
	// (sluice_receipts_dropped_total); nil registers nothing.
	Registerer prometheus.Registerer
	// AuthToken, when set, must come as "Authorization: Bearer <token>" on
	// /v1/ endpoints (the scheme in any case; the token compared in
	// constant time). /healthz, /readyz and /metrics stay open.
	AuthToken string
	// MaxBodyBytes caps request bodies (default 64 KiB); larger ones get 413.
	MaxBodyBytes int64
	// MaxWait caps a request's max_wait_ms (default 10 s).
	MaxWait time.Duration
	// NoWait decides every check at once, whatever its max_wait_ms: the
	// cap on waiting is zero (MaxWait is then ignored; MaxWait 0 alone means
	// the default).
	NoWait bool
	// MaxWaiting caps the requests the server holds at once for max_wait_ms
	// (default 1024); beyond it a request is decided at once.
	MaxWaiting int
	// IdempotencyWindow is how long a request_id's answer is remembered
	// (default 5 minutes); IdempotencyKeys caps how many are in memory
	// (default 100,000).
	IdempotencyWindow time.Duration
	IdempotencyKeys   int
	// ReceiptWindow is how long a check's receipt is kept for /v1/settle
	// (default 10 minutes); MaxReceipts caps how many are (default
	// 1,000,000; the oldest dropped first, counted in
	// sluice_receipts_dropped_total). A record holding in-flight slots is
	// kept until its slots expire, whatever the window and the cap.
	ReceiptWindow time.Duration
	MaxReceipts   int
	// Book keeps request_id answers and receipt records; nil keeps them in
	// this process (book.NewMemory with the windows and caps above). A
	// shared store's book (redisstore.NewBook) lets a retry or a settle
	// reach any instance.
	Book book.Book
	// Logger receives request errors; nil discards them.
	Logger *slog.Logger
	// Ready reports whether the store is reachable (for /readyz); nil means
	// always.
	Ready func(context.Context) error
	// StoreMode is the on_store_error that limits without their own follow
	// when the store is unreachable ("fail_open", "fail_closed" or
	// "local"). With it, /readyz answers 200 ("degraded") while Ready
	// fails, as long as no limit in force (the policy's, read at each
	// request) fails closed (or has a mode other than fail_open and local);
	// else 503. Empty: /readyz answers 503 whenever Ready fails.
	StoreMode string
	// ReadyRequiresStore makes /readyz answer 503 whenever Ready fails,
	// whatever the modes in force.
	ReadyRequiresStore bool
	// EnvoyPolicy, in Envoy-config mode (Limiter nil), returns the body of
	// GET /v1/policy (any value encoding/json encodes; called at each
	// request, so it reports the configuration in force). Nil: /v1/policy
	// answers 404 there, like every /v1/ path.
	EnvoyPolicy func() any
	// Keys, when set, answers GET /v1/top (the heaviest keys per limit)
	// and the activity of GET /v1/stats; the Limiter must have been made
	// with limiter.WithKeyObserver(Keys). Nil (or k 0): /v1/top answers
	// 404 top_off, and /v1/stats has no activity.
	Keys *Keys
	// Status, when set, is called by GET /v1/stats for what the server
	// cannot see itself (the store, keys held, reloads); its answer is
	// encoded as "status".
	Status func() any
	// Overrides, with a Limiter, serves /v1/overrides (PUT, DELETE, GET
	// and GET /v1/overrides/resolve): the overrides in force, compiled
	// against the limiter's policy (the caller keeps them in step with
	// policy reloads: Set.SetPolicy), shared through OverrideStore (kept
	// in step by SyncOverrides). /v1/policy then shows each limit's
	// count, and Registerer gets sluice_overrides{limit}.
	Overrides     *overrides.Set
	OverrideStore overrides.Store
	// AdminToken, when set, is the bearer token every /v1/overrides
	// request needs (AuthToken does not do there; the other endpoints
	// keep AuthToken). Without it /v1/overrides takes AuthToken, and
	// with neither token its writes are accepted only when
	// LoopbackListener says that the handler is served on a loopback
	// address alone (else 403 forbidden).
	AdminToken       string
	LoopbackListener bool
	// AuthTokens are more tokens AuthToken's endpoints accept, each with
	// the name the audit log gives its changes; AdminTokens are more
	// tokens AdminToken's endpoints accept (either list non-empty acts as
	// its single token does).
	AuthTokens, AdminTokens []Token
	// Audit keeps the audit log's records for GET /v1/audit (admin
	// auth, as /v1/overrides); nil keeps the last AuditKept in this
	// process (MemoryAudit). redisstore's AuditLog shares them between
	// instances. Instance names this instance in its records.
	Audit    AuditStore
	Instance string
	// Alerts configures the alerts of limits that declare them: their
	// claims across instances and their webhook (server/alerts.go).
	Alerts AlertConfig
	// Tracer, when set, makes a span of each /v1/check, /v1/settle and
	// /v1/auth request (a child of its traceparent), with the decision's
	// sluice.* attributes (server/trace.go); nil traces nothing and costs
	// nothing.
	Tracer tracing.Tracer
}

// AuthHandler serves forward-auth alone (GET|POST /v1/auth, with the
// token when AuthToken is set, and GET /healthz): sluice serve
// --auth-listen. It needs a Limiter.
func (s *Server) AuthHandler() http.Handler { return s.authMux(s.auth) }

// AuthHandlerClientCert is AuthHandler for a listener whose TLS
// configuration requires and verifies client certificates (sluice serve
// --auth-listen-client-ca): there the verified certificate is the
// credential, so the bearer token is not asked. A request whose connection
// carries no verified client certificate chain (r.TLS nil, or no
// VerifiedChains) answers 401 unauthorized whatever its headers.
func (s *Server) AuthHandlerClientCert() http.Handler {
	return s.authMux(func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
				fail(w, answer.Unauthorized, "a verified client certificate is required")
				return
			}
			h(w, r)
		}
	})
}

// authMux is the forward-auth mux, /v1/auth guarded by guard.
func (s *Server) authMux(guard func(http.HandlerFunc) http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/auth", s.traced("GET /v1/auth", guard(s.forwardAuth)))
	mux.HandleFunc("POST /v1/auth", s.traced("POST /v1/auth", guard(s.forwardAuth)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, answer.NotFound, "this address serves /v1/auth only (--auth-listen)")
	})
	return mux
}

// Server is the HTTP service. It is safe for concurrent use.
type Server struct {
	cfg         Config
	mux         *http.ServeMux
	waiting     atomic.Int64  // checks held now
	waitingFull atomic.Uint64 // checks not held because waiting was at --max-waiting
	book        book.Book
	// Repeated store errors, each message rate-limited (internal/ratelog).
	checkFailedLog, recordLog, syncLog *ratelog.Message
	// ovMu serializes the API's override writes with SyncOverridesNow.
	ovMu       sync.Mutex
	auditStore AuditStore
	spend      spendCounter // each usd limit's spend through this instance (server/spend.go)
	alerts     *alerter     // server/alerts.go
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.NoWait {
		cfg.MaxWait = 0
	} else if cfg.MaxWait <= 0 {
		cfg.MaxWait = 10 * time.Second
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = 1024
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), book: cfg.Book,
		checkFailedLog: ratelog.New(cfg.Logger, slog.LevelError, "check failed"),
		recordLog:      ratelog.New(cfg.Logger, slog.LevelError, "lease not recorded: answered without a lease"),
		syncLog:        ratelog.New(cfg.Logger, slog.LevelWarn, "overrides not synced: the overrides store failed")}
	if s.auditStore = cfg.Audit; s.auditStore == nil {
		s.auditStore = NewMemoryAudit(AuditKept)
	}
	s.mux.HandleFunc("GET /v1/audit", s.admin(false, s.auditList))
	if s.book == nil {
		s.book = book.NewMemory(book.Config{IdempotencyWindow: cfg.IdempotencyWindow, MaxAnswers: cfg.IdempotencyKeys,
			ReceiptWindow: cfg.ReceiptWindow, MaxReceipts: cfg.MaxReceipts}, nil)
	}
	var err error
	if s.alerts, err = newAlerter(cfg.Alerts, cfg.Logger, cfg.Registerer); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_receipts_dropped_total",
			Help: "Receipts (kept for /v1/settle) dropped because more than --max-receipts were held.",
		}, func() float64 { return float64(s.book.Dropped()) })); err != nil {
			return nil, fmt.Errorf("server: registering metrics: %w", err)
		}
		if err := cfg.Registerer.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_waiting_full_total",
			Help: "Checks with max_wait_ms decided at once, not held, because --max-waiting checks were held already.",
		}, func() float64 { return float64(s.waitingFull.Load()) })); err != nil {
			return nil, fmt.Errorf("server: registering metrics: %w", err)
		}
		if cfg.Limiter != nil && cfg.Overrides != nil {
			if err := cfg.Registerer.Register(overridesGauge{cfg.Overrides}); err != nil {
				return nil, fmt.Errorf("server: registering metrics: %w", err)
			}
		}
	}
	if cfg.Limiter != nil && cfg.Overrides != nil {
		if cfg.OverrideStore == nil {
			return nil, errors.New("server: Overrides needs an OverrideStore")
		}
		s.routeOverrides()
	}
	if cfg.Limiter != nil {
		s.mux.HandleFunc("POST /v1/check", s.traced("POST /v1/check", s.auth(s.check)))
		s.mux.HandleFunc("POST /v1/release", s.auth(s.release))
		s.mux.HandleFunc("POST /v1/settle", s.traced("POST /v1/settle", s.auth(s.settle)))
		s.mux.HandleFunc("POST /v1/pause", s.auth(s.pause))
		s.mux.HandleFunc("POST /v1/feedback", s.auth(s.feedback))
		s.mux.HandleFunc("GET /v1/policy", s.auth(s.policy))
		s.mux.HandleFunc("GET /v1/top", s.auth(s.top))
		s.mux.HandleFunc("GET /v1/stats", s.auth(s.stats))
		s.mux.HandleFunc("GET /v1/auth", s.traced("GET /v1/auth", s.auth(s.forwardAuth)))
		s.mux.HandleFunc("POST /v1/auth", s.traced("POST /v1/auth", s.auth(s.forwardAuth)))
		// The live page: one embedded file, no external resources; its
		// reads of /v1/stats and /v1/top carry the token (the page itself
		// holds no data).
		s.mux.HandleFunc("GET /{$}", s.page)
		s.mux.HandleFunc("GET /ui", s.page)
	} else {
		// Envoy-config mode: decisions are served over gRPC only.
		if cfg.EnvoyPolicy != nil {
			s.mux.HandleFunc("GET /v1/policy", s.auth(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, cfg.EnvoyPolicy())
			}))
		}
		s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
			// 404, not no_policy's 503: the table names this exception.
			p := answer.New(answer.NoPolicy, "this service runs Envoy's configuration: use the gRPC RateLimitService")
			p.Status = http.StatusNotFound
			p.Write(w)
		})
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.ready)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	return s, nil
}

// Handler returns the service's HTTP handler. Paths it does not serve
// answer 404 not_found, and methods a path does not take 405
// method_not_allowed (with Allow), in the JSON error shape.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := s.mux.Handler(r)
		if pattern != "" {
			h.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/v1/") && !s.authorized(r) {
			s.unauthorized(w) // every /v1/ path needs the token, unknown ones too
			return
		}
		// The mux's own 404 or 405 (or a redirect): run it into a
		// recorder, keep its status and Allow, answer in JSON.
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.header.Get("Allow"))
			fail(w, answer.MethodNotAllowed, "%s is not allowed on %.200s (allowed: %s)", r.Method, r.URL.Path, rec.header.Get("Allow"))
		case http.StatusNotFound:
			fail(w, answer.NotFound, "no endpoint %.200s", r.URL.Path)
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
		}
	})
}

// statusRecorder keeps a handler's status and header, discarding its body.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return len(b), nil
}
func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) { answer.WriteJSON(w, status, v) }

// fail answers the error code c (its status from internal/answer's table)
// with a formatted message.
func fail(w http.ResponseWriter, c answer.Code, format string, args ...any) {
	answer.Errorf(c, format, args...).Write(w)
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if !s.hasAuthTokens() {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.unauthorized(w)
			return
		}
		h(w, r)
	}
}

// authorized reports whether r carries the bearer token (any case of the
// scheme, the token compared in constant time); true without a token.
func (s *Server) authorized(r *http.Request) bool {
	if !s.hasAuthTokens() {
		return true
	}
	_, ok := s.authToken(r)
	return ok
}

func (s *Server) unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	fail(w, answer.Unauthorized, "missing or wrong bearer token")
}

// decode reads a JSON body into v: one object, known fields only, within
// the size cap. It writes the error answer and returns false on failure.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := s.readBody(w, r)
	if !ok {
		return false
	}
	if err := DecodeStrict(body, v); err != nil {
		fail(w, answer.BadJSON, "%v", err)
		return false
	}
	return true
}

// DecodeStrict decodes exactly one JSON object with known fields only,
// each named in its exact case and given once (in nested objects too: a
// descriptor given twice is refused); every endpoint's body goes through
// it. Its errors name the field and what it wants (`field "cost": want an
// integer`), never Go's types.
func DecodeStrict(body []byte, v any) error {
	if err := checkNames(body, reflect.TypeOf(v)); err != nil {
		return err // (a key given twice, or a field name in another case)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, reflect.TypeOf(v))
	}
	if rest := bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return errors.New("malformed JSON: more than one value") // (or a stray "}" or "]")
	}
	return nil
}

// jsonError restates a decoding error into into (a pointer to a struct)
// without Go's names.
func jsonError(err error, into reflect.Type) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Errorf("the body must be a JSON object, not %s", te.Value)
		}
		if ft, ok := fieldType(into, field); ok && ft.Kind() == reflect.Map && ft.Elem() == te.Type {
			return fmt.Errorf("field %q: each value must be %s, not %s", field, kindName(te.Type), te.Value)
		}
		return fmt.Errorf("field %q: want %s, not %s", field, kindName(te.Type), te.Value)
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.EOF):
		return errors.New("malformed JSON: the body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("malformed JSON: the body ends early")
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return fmt.Errorf("unknown field %s", name)
	}
	return fmt.Errorf("malformed JSON: %s", msg)
}

// fieldType is the type of the struct field (of *T or T) named name in JSON.
func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name || tag == "" && f.Name == name {
			return f.Type, true
		}
	}
	return nil, false
}

// kindName says what a JSON value of Go type t must look like.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		if t.Kind() == reflect.Map && t.Elem().Kind() == reflect.String {
			return "an object of strings"
		}
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return "another type"
}

// readiness is the body of /readyz. Status is "ready" (the store answers,
// or there is no shared store), "degraded" (the store is unreachable and
// every limit in force is answered by its on_store_error) or "unavailable"
// (503: a limit in force fails closed, or ReadyRequiresStore). Store is
// "reachable" or "unreachable" (absent without a Ready probe); Mode is
// StoreMode and Modes the distinct on_store_error of the limits in force,
// sorted, while the store is unreachable. A 503 also carries Error and
// Code ("store_unreachable"). A store that answers and refuses (Ready's
// error has Refused() true, see refusing) is Store "refusing", with
// StoreError and StoreErrorClass saying why.
type readiness struct {
	Status          string      `json:"status"`
	Store           string      `json:"store,omitempty"`
	Mode            string      `json:"mode,omitempty"`
	Modes           []string    `json:"modes,omitempty"`
	StoreError      string      `json:"store_error,omitempty"`
	StoreErrorClass string      `json:"store_error_class,omitempty"`
	Error           string      `json:"error,omitempty"`
	Code            answer.Code `json:"code,omitempty"`
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	var p *policy.Policy
	if s.cfg.Limiter != nil {
		if p = s.cfg.Limiter.Policy(); p == nil {
			fail(w, answer.NoPolicy, "no policy loaded")
			return
		}
	}
	if s.cfg.Ready == nil {
		writeJSON(w, http.StatusOK, readiness{Status: "ready"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	err := s.cfg.Ready(ctx)
	if err == nil {
		writeJSON(w, http.StatusOK, readiness{Status: "ready", Store: "reachable"})
		return
	}
	if s.refusing(w, err) {
		return
	}
	// The modes in force: each limit's own, else the store's default (in
	// Envoy-config mode, the default alone).
	var modes []string
	if p == nil {
		if s.cfg.StoreMode != "" {
			modes = []string{s.cfg.StoreMode}
		}
	} else {
		for _, l := range p.Limits {
			m := l.OnStoreError
			if m == "" {
				m = s.cfg.StoreMode
			}
			if m != "" && !slices.Contains(modes, m) {
				modes = append(modes, m)
			}
		}
		slices.Sort(modes)
	}
	rd := readiness{Status: "degraded", Store: "unreachable", Mode: s.cfg.StoreMode, Modes: modes, StoreError: err.Error()}
	// Only fail_open and local answer without the store.
	unanswerable := func(m string) bool { return m != policy.FailOpen && m != policy.Local }
	if s.cfg.StoreMode == "" || s.cfg.ReadyRequiresStore || slices.ContainsFunc(modes, unanswerable) {
		rd.Status, rd.Code = "unavailable", answer.StoreUnreachable
		rd.Error = "the store is unreachable: " + err.Error()
		writeJSON(w, http.StatusServiceUnavailable, rd)
		return
	}
	writeJSON(w, http.StatusOK, rd)
}
