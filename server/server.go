// Package server is sluice's HTTP/JSON rate-limit service: POST /v1/check
// decides a request against the policy in force, POST /v1/release frees
// in-flight leases, and GET /healthz, /readyz, /metrics and /v1/policy
// report on the service.
package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// Config configures a Server. Zero values have the documented defaults.
type Config struct {
	// Limiter decides; its policy can be swapped at run time (hot reload).
	// Nil serves only /healthz, /readyz and /metrics (Envoy-config mode).
	Limiter *limiter.Limiter
	// Gatherer serves /metrics; nil serves the default registry.
	Gatherer prometheus.Gatherer
	// AuthToken, when set, must come as "Authorization: Bearer <token>" on
	// /v1/ endpoints (compared in constant time). /healthz, /readyz and
	// /metrics stay open.
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
	// (default 5 minutes); IdempotencyKeys caps how many are (default 100,000).
	IdempotencyWindow time.Duration
	IdempotencyKeys   int
	// LeaseWindow is how long a check's lease (its in-flight slots and what
	// it took, for /v1/settle) is remembered (default 10 minutes);
	// LeaseRecords caps how many are (default 100,000; the oldest go first).
	LeaseWindow  time.Duration
	LeaseRecords int
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
	// Redis, when set, keeps request_id answers and lease records in Redis
	// (keys under RedisPrefix), so that a retried check or a settle may
	// reach any instance sharing the store. Nil keeps them in the process.
	Redis       rueidis.Client
	RedisPrefix string
}

// Server is the HTTP service. It is safe for concurrent use.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	waiting atomic.Int64
	book    book
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
	if cfg.IdempotencyWindow <= 0 {
		cfg.IdempotencyWindow = 5 * time.Minute
	}
	if cfg.IdempotencyKeys <= 0 {
		cfg.IdempotencyKeys = 100_000
	}
	if cfg.LeaseWindow <= 0 {
		cfg.LeaseWindow = 10 * time.Minute
	}
	if cfg.LeaseRecords <= 0 {
		cfg.LeaseRecords = 100_000
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	if cfg.Redis != nil {
		s.book = newRedisBook(cfg.Redis, cfg.RedisPrefix, cfg.IdempotencyWindow, cfg.LeaseWindow)
	} else {
		s.book = memBook{idem: newIdempotency(cfg.IdempotencyWindow, cfg.IdempotencyKeys),
			leases: newLeaseBook(cfg.LeaseWindow, cfg.LeaseRecords)}
	}
	if cfg.Limiter != nil {
		s.mux.HandleFunc("POST /v1/check", s.auth(s.check))
		s.mux.HandleFunc("POST /v1/release", s.auth(s.release))
		s.mux.HandleFunc("POST /v1/settle", s.auth(s.settle))
		s.mux.HandleFunc("GET /v1/policy", s.auth(s.policy))
	} else {
		// Envoy-config mode: decisions are served over gRPC only.
		if cfg.EnvoyPolicy != nil {
			s.mux.HandleFunc("GET /v1/policy", s.auth(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, cfg.EnvoyPolicy())
			}))
		}
		s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
			fail(w, http.StatusNotFound, "no_policy", "this service runs Envoy's configuration: use the gRPC RateLimitService")
		})
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.ready)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	return s, nil
}

// Handler returns the service's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Limit string `json:"limit,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeJSON(w, status, apiError{Error: fmt.Sprintf(format, args...), Code: code})
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.AuthToken == "" {
		return h
	}
	want := []byte("Bearer " + s.cfg.AuthToken)
	return func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			fail(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
			return
		}
		h(w, r)
	}
}

// decode reads a JSON body into v: one object, known fields only, within
// the size cap. It writes the error answer and returns false on failure.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			fail(w, http.StatusRequestEntityTooLarge, "body_too_large", "request body exceeds %d bytes", s.cfg.MaxBodyBytes)
		} else {
			fail(w, http.StatusBadRequest, "bad_body", "reading the body: %v", err)
		}
		return false
	}
	if err := DecodeStrict(body, v); err != nil {
		fail(w, http.StatusBadRequest, "bad_json", "%v", err)
		return false
	}
	return true
}

// DecodeStrict decodes exactly one JSON object with known fields only.
func DecodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON: %v", err)
	}
	if dec.More() {
		return errors.New("malformed JSON: more than one value")
	}
	return nil
}

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Descriptors map[string]string `json:"descriptors"`
	// Cost: absent means the policy's cost for the descriptors; 0 peeks.
	Cost      *int64 `json:"cost"`
	MaxWaitMS int64  `json:"max_wait_ms"`
	Retry     bool   `json:"retry"`
	RequestID string `json:"request_id"`
}

// Validate checks a request's fields.
func (c *CheckRequest) Validate() error {
	switch {
	case c.Descriptors == nil:
		return errors.New("descriptors are missing")
	case len(c.Descriptors) > 64:
		return fmt.Errorf("%d descriptors, more than 64", len(c.Descriptors))
	case c.Cost != nil && *c.Cost < 0:
		return fmt.Errorf("cost %d is negative", *c.Cost)
	case c.MaxWaitMS < 0:
		return fmt.Errorf("max_wait_ms %d is negative", c.MaxWaitMS)
	case len(c.RequestID) > 256:
		return errors.New("request_id longer than 256 bytes")
	}
	for k, v := range c.Descriptors {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return fmt.Errorf("descriptor %.40q: names must be 1 to 128 bytes, values at most 1024", k)
		}
	}
	return nil
}

// CheckResponse is the body of a /v1/check answer.
type CheckResponse struct {
	Allowed      bool                  `json:"allowed"`
	RetryAfterMS int64                 `json:"retry_after_ms"`
	Lease        string                `json:"lease,omitempty"`
	Limits       []limiter.LimitStatus `json:"limits"`
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req CheckRequest
	if !s.decode(w, r, &req) {
		return
	}
	if err := req.Validate(); err != nil {
		fail(w, http.StatusBadRequest, "bad_request", "%v", err)
		return
	}
	if req.RequestID != "" {
		ans, owner, err := s.book.begin(r.Context(), req.RequestID)
		if err != nil {
			fail(w, http.StatusServiceUnavailable, "store_error", "request_id: %v", err)
			return
		}
		if !owner {
			if ans == nil {
				fail(w, http.StatusServiceUnavailable, "retry", "the first request with this request_id did not finish")
				return
			}
			ans.write(w)
			return
		}
		s.book.finish(r.Context(), req.RequestID, s.decide(w, r, &req))
		return
	}
	s.decide(w, r, &req)
}

// decide runs a validated check and writes the answer; it returns the
// answer when it is a decision (kept for request_id retries), nil for errors.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, req *CheckRequest) *answer {
	lr := limiter.Request{Descriptors: req.Descriptors, Retry: req.Retry, Receipt: true}
	if req.Cost != nil {
		if *req.Cost == 0 {
			lr.Peek = true
		} else {
			lr.Cost = *req.Cost
		}
	}
	if req.MaxWaitMS > 0 {
		if s.waiting.Add(1) <= int64(s.cfg.MaxWaiting) {
			lr.MaxWait = min(time.Duration(req.MaxWaitMS)*time.Millisecond, s.cfg.MaxWait)
		}
		defer s.waiting.Add(-1)
	}
	res, err := s.cfg.Limiter.Check(r.Context(), lr)
	if err != nil {
		var ce *limiter.CostError
		switch {
		case errors.As(err, &ce):
			writeJSON(w, http.StatusUnprocessableEntity, apiError{Error: ce.Error(), Code: "cost_exceeds_capacity", Limit: ce.Limit})
		case errors.Is(err, sluice.ErrInvalidCost):
			fail(w, http.StatusBadRequest, "bad_request", "%v", err)
		case errors.Is(err, store.ErrFull):
			fail(w, http.StatusServiceUnavailable, "store_full", "%v", err)
		default:
			s.cfg.Logger.Error("check failed", "error", err)
			fail(w, http.StatusServiceUnavailable, "store_error", "%v", err)
		}
		return nil
	}
	ans := s.answer(r.Context(), res)
	ans.write(w)
	return ans
}

// answer is a decided /v1/check reply, kept for idempotent retries.
type answer struct {
	status  int
	headers http.Header
	body    []byte
}

func (a *answer) write(w http.ResponseWriter) {
	for k, v := range a.headers {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	w.Write(a.body)
}

func (s *Server) answer(ctx context.Context, res limiter.Result) *answer {
	resp := CheckResponse{Allowed: res.Allowed, Limits: res.Limits}
	if resp.Limits == nil {
		resp.Limits = []limiter.LimitStatus{}
	}
	if !res.Allowed {
		resp.RetryAfterMS = limiter.CeilMS(res.RetryAfter)
	}
	if res.Allowed && (res.Lease.ID != "" || !res.Receipt.Empty()) {
		rc, _ := res.Receipt.MarshalBinary()
		if res.Receipt.Empty() {
			rc = nil
		}
		id, err := s.book.addLease(ctx, res.Lease, rc)
		if err != nil {
			// Admitted, but the lease could not be recorded: the slots
			// expire by their TTL and the cost stands as charged.
			s.cfg.Logger.Error("lease not recorded", "error", err)
		}
		resp.Lease = id
	}
	body, _ := json.Marshal(resp)
	a := &answer{status: http.StatusOK, headers: http.Header{}, body: append(body, '\n')}
	if !res.Allowed {
		a.status = http.StatusTooManyRequests
		a.headers.Set("Retry-After", strconv.FormatInt(int64((res.RetryAfter+time.Second-1)/time.Second), 10))
	}
	if pol, rl, ok := httplimit.RateLimitHeaders(res); ok {
		a.headers.Set("RateLimit-Policy", pol)
		a.headers.Set("RateLimit", rl)
	}
	return a
}

type releaseRequest struct {
	Lease string `json:"lease"`
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.Lease == "" {
		fail(w, http.StatusBadRequest, "bad_request", "lease is missing")
		return
	}
	slots, ok, err := s.book.lease(r.Context(), req.Lease)
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "store_error", "%v", err)
		return
	}
	if !ok {
		fail(w, http.StatusNotFound, "unknown_lease", "no lease %.64q (unknown, or older than the lease window)", req.Lease)
		return
	}
	if slots.ID != "" {
		if err := s.cfg.Limiter.Release(r.Context(), slots); err != nil {
			fail(w, http.StatusServiceUnavailable, "store_error", "%v", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]bool{"released": true})
}

// SettleRequest is the body of POST /v1/settle.
type SettleRequest struct {
	Lease      string `json:"lease"`
	ActualCost *int64 `json:"actual_cost"`
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case req.Lease == "":
		fail(w, http.StatusBadRequest, "bad_request", "lease is missing")
		return
	case req.ActualCost == nil:
		fail(w, http.StatusBadRequest, "bad_request", "actual_cost is missing")
		return
	case *req.ActualCost < 0:
		fail(w, http.StatusBadRequest, "bad_request", "actual_cost %d is negative", *req.ActualCost)
		return
	}
	raw, ok, err := s.book.takeReceipt(r.Context(), req.Lease)
	switch {
	case err != nil:
		fail(w, http.StatusServiceUnavailable, "store_error", "%v", err)
		return
	case !ok:
		fail(w, http.StatusNotFound, "unknown_lease", "no lease %.64q (unknown, or older than the lease window)", req.Lease)
		return
	case len(raw) == 0:
		fail(w, http.StatusConflict, "already_settled", "lease %.64q was settled already (or took no cost)", req.Lease)
		return
	}
	rec, err := s.cfg.Limiter.UnmarshalReceipt(raw)
	if err != nil {
		fail(w, http.StatusInternalServerError, "bad_receipt", "%v", err)
		return
	}
	if err := s.cfg.Limiter.Settle(r.Context(), rec, *req.ActualCost); err != nil {
		fail(w, http.StatusServiceUnavailable, "store_error", "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"settled": true})
}

// leaseBook remembers, per lease ID handed to a client, the in-flight
// slots and the receipt of an admitted check, bounded in time and number.
type leaseBook struct {
	mu     sync.Mutex
	window time.Duration
	max    int
	m      map[string]*leaseRecord
	order  []string
}

type leaseRecord struct {
	slots   store.Lease
	receipt []byte
	at      time.Time
}

func newLeaseBook(window time.Duration, max int) *leaseBook {
	return &leaseBook{window: window, max: max, m: map[string]*leaseRecord{}}
}

func (b *leaseBook) add(slots store.Lease, rc []byte) string {
	id := newLeaseID()
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.m[id] = &leaseRecord{slots: slots, receipt: rc, at: now}
	b.order = append(b.order, id)
	for len(b.order) > 0 {
		old := b.order[0]
		e, ok := b.m[old]
		if ok && now.Sub(e.at) < b.window && len(b.m) <= b.max {
			break
		}
		delete(b.m, old)
		b.order = b.order[1:]
	}
	return id
}

func (b *leaseBook) get(id string) (leaseRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[id]
	if !ok || time.Since(e.at) >= b.window {
		return leaseRecord{}, false
	}
	return *e, true
}

// takeReceipt returns a lease's receipt once (settling twice is refused).
func (b *leaseBook) takeReceipt(id string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[id]
	if !ok || time.Since(e.at) >= b.window {
		return nil, false
	}
	rc := e.receipt
	e.receipt = nil
	return rc, true
}

func (s *Server) policy(w http.ResponseWriter, r *http.Request) {
	p := s.cfg.Limiter.Policy()
	type lim struct {
		Name      string            `json:"name"`
		Key       string            `json:"key"`
		Algorithm string            `json:"algorithm"`
		When      map[string]string `json:"when,omitempty"`
		Capacity  int64             `json:"capacity"`
		Refill    float64           `json:"refill_per_second,omitempty"`
		Window    string            `json:"window,omitempty"`
		LeaseTTL  string            `json:"lease_ttl,omitempty"`
		// OnStoreError is the limit's own on_store_error (absent: the
		// server's --on-store-error).
		OnStoreError string `json:"on_store_error,omitempty"`
	}
	out := struct {
		Version string `json:"version"`
		Limits  []lim  `json:"limits"`
		Source  string `json:"source"`
	}{Version: p.Version, Source: string(p.Source)}
	for _, l := range p.Limits {
		x := lim{Name: l.Name, Key: l.Key, Algorithm: l.Kind.String(), When: l.When, Capacity: l.Capacity(), OnStoreError: l.OnStoreError}
		switch l.Kind {
		case policy.TokenBucket:
			x.Refill = l.Bucket.Rate
		case policy.SlidingWindow, policy.FixedWindow:
			x.Window = l.Window.Window.String()
		case policy.Concurrency:
			x.LeaseTTL = l.LeaseTTL.String()
		}
		out.Limits = append(out.Limits, x)
	}
	writeJSON(w, http.StatusOK, out)
}

// readiness is the body of /readyz. Status is "ready" (the store answers,
// or there is no shared store), "degraded" (the store is unreachable and
// every limit in force is answered by its on_store_error) or "unavailable"
// (503: a limit in force fails closed, or ReadyRequiresStore). Store is
// "reachable" or "unreachable" (absent without a Ready probe); Mode is
// StoreMode and Modes the distinct on_store_error of the limits in force,
// sorted, while the store is unreachable. A 503 also carries Error and
// Code ("store_unreachable").
type readiness struct {
	Status     string   `json:"status"`
	Store      string   `json:"store,omitempty"`
	Mode       string   `json:"mode,omitempty"`
	Modes      []string `json:"modes,omitempty"`
	StoreError string   `json:"store_error,omitempty"`
	Error      string   `json:"error,omitempty"`
	Code       string   `json:"code,omitempty"`
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	var p *policy.Policy
	if s.cfg.Limiter != nil {
		if p = s.cfg.Limiter.Policy(); p == nil {
			fail(w, http.StatusServiceUnavailable, "no_policy", "no policy loaded")
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
	unanswerable := func(m string) bool { return m != "fail_open" && m != "local" }
	if s.cfg.StoreMode == "" || s.cfg.ReadyRequiresStore || slices.ContainsFunc(modes, unanswerable) {
		rd.Status, rd.Code = "unavailable", "store_unreachable"
		rd.Error = "the store is unreachable: " + err.Error()
		writeJSON(w, http.StatusServiceUnavailable, rd)
		return
	}
	writeJSON(w, http.StatusOK, rd)
}

// idempotency remembers answers by request_id for a window, bounded. A
// retry that arrives while the first request is still deciding waits for
// its answer, so a request is never charged twice.
type idempotency struct {
	mu     sync.Mutex
	window time.Duration
	max    int
	m      map[string]*idemEntry
	order  []string // insertion order, for expiry and the cap
}

type idemEntry struct {
	a    *answer
	at   time.Time
	done chan struct{}
}

func newIdempotency(window time.Duration, max int) *idempotency {
	return &idempotency{window: window, max: max, m: map[string]*idemEntry{}}
}

func (c *idempotency) expireLocked(now time.Time) {
	for len(c.order) > 0 {
		k := c.order[0]
		e, ok := c.m[k]
		if ok && (now.Sub(e.at) < c.window && len(c.m) <= c.max || e.a == nil && !closed(e.done)) {
			return
		}
		delete(c.m, k)
		c.order = c.order[1:]
	}
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// begin returns (nil, true) when the caller owns id and must finish it;
// else the first request's answer (nil if it failed).
func (c *idempotency) begin(ctx context.Context, id string) (*answer, bool) {
	c.mu.Lock()
	c.expireLocked(time.Now())
	e, ok := c.m[id]
	if !ok {
		c.m[id] = &idemEntry{at: time.Now(), done: make(chan struct{})}
		c.order = append(c.order, id)
		c.mu.Unlock()
		return nil, true
	}
	c.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, false
	}
	return e.a, false
}

// finish records the owner's answer (nil: it failed and is forgotten).
func (c *idempotency) finish(id string, a *answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[id]
	if e == nil {
		return
	}
	if a == nil {
		delete(c.m, id)
	} else {
		e.a, e.at = a, time.Now()
	}
	close(e.done)
}
