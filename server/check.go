// The bodies of /v1/check, /v1/release, /v1/pause and /v1/settle, and their validation.

package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
)

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Descriptors map[string]string `json:"descriptors"`
	// Cost: absent means the policy's cost for the descriptors; 0 peeks.
	Cost *int64 `json:"cost"`
	// Costs overrides Cost for the limits it names (limiter.Request.Costs):
	// {"tpm": 1200}.
	Costs     CostMap `json:"costs"`
	MaxWaitMS int64   `json:"max_wait_ms"`
	// Reserve, with MaxWaitMS, books without holding the request: the
	// answer comes at once with WaitMS (act after it) and a receipt id
	// (limiter.Request.Reserve).
	Reserve   bool   `json:"reserve"`
	Retry     bool   `json:"retry"`
	RequestID string `json:"request_id"`
	// UsageEstimate is a model call's estimate (server/spend.go): its
	// spend reserved on every usd limit that applies, its tokens on every
	// token limit, unless Costs names the limit.
	UsageEstimate *UsageEstimate `json:"usage_estimate"`
	// Priority names the request's priority class (limiter.Request.
	// Priority): empty is the policy's default_priority; a class the
	// policy does not list is 400 unknown_priority.
	Priority string `json:"priority"`
}

// The bounds of a check request (keys are stored, so their size bounds
// memory).
const (
	MaxDescriptors     = 64   // descriptors per request
	MaxDescriptorName  = 128  // bytes of a descriptor's name
	MaxDescriptorValue = 1024 // bytes of a descriptor's value
	MaxRequestID       = 256  // bytes of a request_id
)

// Validate checks a request's fields.
func (c *CheckRequest) Validate() error {
	switch {
	case c.Descriptors == nil:
		return errors.New("descriptors are missing")
	case len(c.Descriptors) > MaxDescriptors:
		return fmt.Errorf("%d descriptors, more than %d", len(c.Descriptors), MaxDescriptors)
	case c.Cost != nil && *c.Cost < 0:
		return fmt.Errorf("cost %d is negative", *c.Cost)
	case c.MaxWaitMS < 0:
		return fmt.Errorf("max_wait_ms %d is negative", c.MaxWaitMS)
	case len(c.Costs) > MaxDescriptors:
		return fmt.Errorf("costs name %d limits, more than %d", len(c.Costs), MaxDescriptors)
	case len(c.RequestID) > MaxRequestID:
		return fmt.Errorf("request_id of %d bytes, more than %d", len(c.RequestID), MaxRequestID)
	}
	for n, v := range c.Costs {
		if v < 0 {
			return fmt.Errorf("costs: cost %d for limit %.40q is negative", v, n)
		}
	}
	for k, v := range c.Descriptors {
		switch {
		case k == "" || len(k) > MaxDescriptorName:
			return fmt.Errorf("descriptor name %.40q is %d bytes: names are 1 to %d bytes", k, len(k), MaxDescriptorName)
		case len(v) > MaxDescriptorValue:
			return fmt.Errorf("descriptor %.40q: its value is %d bytes, more than %d", k, len(v), MaxDescriptorValue)
		}
	}
	return c.UsageEstimate.validate()
}

// Fingerprint is what makes two checks the same request for request_id:
// their descriptors and their cost (absent, or its value) and per-limit
// costs. The retry flag
// and max_wait_ms are left out: a retry of a request is marked as one, and
// how long its caller waits does not change what it asks for.
func (c *CheckRequest) Fingerprint() string {
	h := sha256.New()
	keys := make([]string, 0, len(c.Descriptors))
	for k := range c.Descriptors {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		// Length-prefixed, so that no two descriptor sets write the same bytes.
		fmt.Fprintf(h, "d%d:%s%d:%s", len(k), k, len(c.Descriptors[k]), c.Descriptors[k])
	}
	if c.Cost == nil {
		h.Write([]byte("c-"))
	} else {
		fmt.Fprintf(h, "c%d", *c.Cost)
	}
	if c.Reserve {
		h.Write([]byte("r"))
	}
	names := make([]string, 0, len(c.Costs))
	for n := range c.Costs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "l%d:%s%d", len(n), n, c.Costs[n])
	}
	c.UsageEstimate.fingerprint(h)
	if c.Priority != "" {
		fmt.Fprintf(h, "p%d:%s", len(c.Priority), c.Priority)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// CheckResponse is the body of a /v1/check answer.
type CheckResponse struct {
	Allowed      bool   `json:"allowed"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ReceiptID    string `json:"lease,omitempty"`
	// WaitMS answers a reserve: how many ms from now the request may act
	// (rounded up; 0: at once). Absent for other checks.
	WaitMS *int64                `json:"wait_ms,omitempty"`
	Limits []limiter.LimitStatus `json:"limits"`
	// Priority is the request's priority class (its own, or the policy's
	// default_priority); absent when it has none.
	Priority string `json:"priority,omitempty"`
	// Error, Code and Limit answer a request refused by a deny override
	// (403 denied; Limit names the limit): absent otherwise.
	Error string      `json:"error,omitempty"`
	Code  answer.Code `json:"code,omitempty"`
	Limit string      `json:"limit,omitempty"`
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req CheckRequest
	if !s.decode(w, r, &req) {
		return
	}
	if err := req.Validate(); err != nil {
		fail(w, answer.BadRequest, "%v", err)
		return
	}
	if req.RequestID == "" {
		s.decide(w, r, &req)
		return
	}
	fp := req.Fingerprint()
	raw, owner, err := s.book.Begin(r.Context(), req.RequestID, fp)
	switch {
	case errors.Is(err, book.ErrMismatch):
		fail(w, answer.RequestIDMismatch,
			"request_id %.64q was used by a request with other descriptors or cost; nothing was charged", req.RequestID)
	case err != nil:
		fail(w, answer.StoreError, "request_id: %v", err)
	case owner:
		var keep []byte
		if a := s.decide(w, r, &req); a != nil {
			keep, _ = json.Marshal(a)
		}
		// (also when the caller has left: a claim left pending would make
		// its retries fail until the window ends)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		s.book.Finish(ctx, req.RequestID, fp, keep)
		cancel()
	case raw == nil:
		fail(w, answer.Retry, "the first request with this request_id did not finish")
	default:
		var a reply
		if err := json.Unmarshal(raw, &a); err != nil {
			fail(w, answer.BadAnswer, "the stored answer for this request_id is unreadable")
			return
		}
		a.write(w)
	}
}

// decide runs a validated check and writes the answer; it returns the
// answer when it is a decision (kept for request_id retries), nil for errors.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, req *CheckRequest) *reply {
	lr := limiter.Request{Descriptors: req.Descriptors, Costs: req.Costs, Retry: req.Retry, Receipt: true, RefuseUnmatched: true, Priority: req.Priority}
	if req.Cost != nil {
		if *req.Cost == 0 {
			lr.Peek = true
		} else {
			lr.Cost = *req.Cost
		}
	}
	switch {
	case req.MaxWaitMS > 0 && req.Reserve:
		// Booked, not held: not counted against --max-waiting.
		lr.MaxWait, lr.Reserve = min(time.Duration(req.MaxWaitMS)*time.Millisecond, s.cfg.MaxWait), true
	case req.MaxWaitMS > 0:
		if s.waiting.Add(1) <= int64(s.cfg.MaxWaiting) {
			lr.MaxWait = min(time.Duration(req.MaxWaitMS)*time.Millisecond, s.cfg.MaxWait)
		} else if s.cfg.MaxWait > 0 {
			s.waitingFull.Add(1) // (decided at once, as with --max-wait 0, but counted)
		}
		defer s.waiting.Add(-1)
	}
	if !s.usageCosts(w, req, &lr) {
		return nil
	}
	res, err := s.cfg.Limiter.Check(r.Context(), lr)
	s.spentCheck(&lr, &res)
	if err == nil {
		s.alerts.observe(s.cfg.Limiter.Policy(), &res) // (near_limit, and the alerts crossed: queued, never waited for)
	}
	s.traceDecision(r.Context(), lr, res, err)
	if err != nil {
		p := answer.Classify(err)
		if p.Status == http.StatusServiceUnavailable && p.Code != answer.StoreFull {
			s.checkFailedLog.Log(slog.String("error", err.Error()))
		}
		p.Write(w)
		return nil
	}
	a := s.reply(r, res, req.Reserve)
	a.write(w)
	if lr.MaxWait > 0 && !lr.Reserve && !res.Allowed && r.Context().Err() != nil {
		// Held, and its caller left before its turn: the booking was
		// returned, and this refusal reached nobody. A retry with its
		// request_id decides anew.
		return nil
	}
	return a
}

// reply is a decided /v1/check answer, kept for idempotent retries.
type reply struct {
	Status  int         `json:"status"`
	Headers http.Header `json:"headers"`
	Body    []byte      `json:"body"`
}

func (a *reply) write(w http.ResponseWriter) {
	for k, v := range a.Headers {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

func (s *Server) reply(r *http.Request, res limiter.Result, reserve bool) *reply {
	resp := CheckResponse{Allowed: res.Allowed, Limits: res.Limits, Priority: res.Priority}
	if reserve && res.Allowed {
		ms := limiter.CeilMS(res.Wait)
		resp.WaitMS = &ms
	}
	if resp.Limits == nil {
		resp.Limits = []limiter.LimitStatus{}
	}
	if !res.Allowed {
		resp.RetryAfterMS = limiter.CeilMS(res.RetryAfter)
	}
	denied := res.DeniedBy()
	if denied != "" {
		p := answer.Deny(denied)
		resp.Error, resp.Code, resp.Limit = p.Msg, p.Code, p.Limit
	}
	if res.Allowed && (res.Slots.ID != "" || !res.Receipt.Empty()) {
		rec := book.Record{Slots: res.Slots, SlotsTTL: s.slotsTTL(res)}
		if !res.Receipt.Empty() {
			rec.Receipt, _ = res.Receipt.MarshalCompact() // (the compact form: about a third of the JSON)
		}
		id, err := s.book.AddRecord(r.Context(), rec)
		if err != nil {
			// Admitted, but the receipt record could not be written: no receipt id
			// is handed out (every id answered can be released and
			// settled); the slots expire by their TTL and the cost stands
			// as charged. (A shared store's book behind the failover
			// wrapper records it in process instead: failover.Book.)
			s.recordLog.Log(slog.String("error", err.Error()))
			id = ""
		}
		resp.ReceiptID = id
	}
	body, _ := json.Marshal(resp)
	a := &reply{Status: http.StatusOK, Headers: http.Header{}, Body: append(body, '\n')}
	if !res.Allowed {
		a.Status = http.StatusTooManyRequests
	}
	answer.OfResult(res).Set(a.Headers)
	if denied != "" { // (retrying is useless: no Retry-After)
		a.Status = answer.Denied.Status()
		a.Headers.Del("Retry-After")
	}
	return a
}

// slotsTTL is how long a result's in-flight slots live: the longest
// lease_ttl of its max_in_flight limits.
func (s *Server) slotsTTL(res limiter.Result) time.Duration {
	if res.Slots.ID == "" {
		return 0
	}
	p := s.cfg.Limiter.Policy()
	var ttl time.Duration
	for _, st := range res.Limits {
		if l := p.Limit(st.Name); l != nil {
			ttl = max(ttl, l.SlotTTL)
		}
	}
	return ttl
}

type releaseRequest struct {
	ReceiptID string `json:"lease"`
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.ReceiptID == "" {
		fail(w, answer.BadRequest, "lease is missing")
		return
	}
	slots, err := s.book.Slots(r.Context(), req.ReceiptID)
	switch {
	case errors.Is(err, book.ErrUnknown):
		fail(w, answer.UnknownLease, "no lease %.64q (never issued, or its slots and receipt have expired)", req.ReceiptID)
		return
	case err != nil:
		fail(w, answer.StoreError, "%v", err)
		return
	}
	if slots.ID != "" {
		if err := s.cfg.Limiter.Release(r.Context(), slots); err != nil {
			fail(w, answer.StoreError, "%v", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]bool{"released": true})
}

// PauseRequest is the body of POST /v1/pause: a server's retry hint seen
// by one caller, for every caller (limiter.Limiter.Pause).
type PauseRequest struct {
	Descriptors  map[string]string `json:"descriptors"`
	RetryAfterMS int64             `json:"retry_after_ms"`
	// Limits names the limits to pause; absent: every token-bucket limit
	// that applies to the descriptors (an empty list is an error).
	Limits []string `json:"limits"`
}

// MaxPause is the longest pause /v1/pause accepts (limiter.MaxPause).
const MaxPause = limiter.MaxPause

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var req PauseRequest
	if !s.decode(w, r, &req) {
		return
	}
	cr := CheckRequest{Descriptors: req.Descriptors}
	err := cr.Validate()
	switch {
	case err != nil:
		fail(w, answer.BadRequest, "%v", err)
		return
	case req.RetryAfterMS == 0:
		fail(w, answer.BadRequest, "retry_after_ms is missing or 0 (1 to %d: 24 hours)", MaxPause.Milliseconds())
		return
	case req.RetryAfterMS < 0 || req.RetryAfterMS > MaxPause.Milliseconds():
		fail(w, answer.BadRequest, "retry_after_ms %d must be 1 to %d (24 hours)", req.RetryAfterMS, MaxPause.Milliseconds())
		return
	case len(req.Limits) > MaxDescriptors:
		fail(w, answer.BadRequest, "limits names %d limits, more than %d", len(req.Limits), MaxDescriptors)
		return
	case req.Limits != nil && len(req.Limits) == 0:
		fail(w, answer.BadRequest, "limits is empty: name the limits to pause, or leave it out to pause every token-bucket limit that applies")
		return
	}
	until, err := s.cfg.Limiter.Pause(r.Context(), req.Descriptors, time.Duration(req.RetryAfterMS)*time.Millisecond, req.Limits)
	switch {
	case errors.Is(err, limiter.ErrUnknownLimit):
		answer.Classify(err).Write(w)
		return
	case errors.Is(err, sluice.ErrInvalidLimit):
		fail(w, answer.BadRequest, "%s", strings.TrimPrefix(err.Error(), "sluice: "))
		return
	case err != nil:
		answer.Classify(err).Write(w)
		return
	}
	s.auditRequest(r, "pause", map[string]any{"descriptors": s.shownDescriptors(req.Descriptors), "limits": req.Limits,
		"retry_after_ms": req.RetryAfterMS, "paused_until_ms": until.UnixMilli()})
	writeJSON(w, http.StatusOK, map[string]int64{"paused_until_ms": until.UnixMilli()})
}

// badReceipt is a receipt that does not decode (a corrupt record).
type badReceipt struct{ err error }

func (b badReceipt) Error() string { return b.err.Error() }

// SettleRequest is the body of POST /v1/settle.
type SettleRequest struct {
	ReceiptID  string `json:"lease"`
	ActualCost *int64 `json:"actual_cost"`
	// ActualCosts settles the limits it names with their own actual cost;
	// the others settle with ActualCost when given, else keep what they
	// took.
	ActualCosts CostMap `json:"actual_costs"`
	// Release also frees the lease's in-flight slots, in the same store
	// call as the settle (limiter.Limiter.SettleRelease): a finished
	// request's /v1/settle and /v1/release in one. A settle refused for
	// the receipt's state (settled already, dropped, expired, corrupt)
	// still frees them; one refused for its costs frees nothing.
	Release bool `json:"release"`
	// Usage is what the model call used (server/spend.go): it settles
	// the receipt's limits that count usage (spend, tokens) that
	// ActualCosts does not name.
	Usage *UsageReport `json:"usage"`
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case req.ReceiptID == "":
		fail(w, answer.BadRequest, "lease is missing")
		return
	case req.ActualCost == nil && len(req.ActualCosts) == 0 && req.Usage == nil:
		fail(w, answer.BadRequest, "actual_cost (or actual_costs, or usage) is missing")
		return
	case req.Usage.validate() != nil:
		fail(w, answer.BadRequest, "%v", req.Usage.validate())
		return
	case req.ActualCost != nil && *req.ActualCost < 0:
		fail(w, answer.BadRequest, "actual_cost %d is negative", *req.ActualCost)
		return
	}
	for n, v := range req.ActualCosts {
		if v < 0 {
			fail(w, answer.BadRequest, "actual_costs: cost %d for limit %.40q is negative", v, n)
			return
		}
	}
	actual := limiter.KeepCost
	if req.ActualCost != nil {
		actual = *req.ActualCost
	}
	var rec limiter.Receipt
	check := func(raw []byte) error {
		var err error
		if rec, err = s.cfg.Limiter.UnmarshalReceipt(raw); err != nil {
			return badReceipt{err}
		}
		if req.ActualCosts, err = s.usageActuals(rec, &req); err != nil {
			return err
		}
		return s.cfg.Limiter.CheckSettleCosts(rec, actual, req.ActualCosts)
	}
	var slots store.Slots // the lease's, when Release asks to free them (in the book's own calls)
	var err error
	if req.Release {
		_, slots, err = book.TakeReceiptSlots(r.Context(), s.book, req.ReceiptID, check)
	} else {
		_, err = s.book.TakeReceipt(r.Context(), req.ReceiptID, check)
	}
	if usageRefused(w, err) {
		return
	}
	var ce *limiter.CostError
	var br badReceipt
	switch {
	case errors.As(err, &ce), errors.Is(err, limiter.ErrUnknownLimit):
		answer.Classify(err).Write(w) // nothing changed: the receipt can be settled again
		return
	case err != nil && slots.ID != "" && (errors.Is(err, book.ErrUnknown) || errors.Is(err, book.ErrDropped) ||
		errors.Is(err, book.ErrSettled) || errors.As(err, &br)):
		// Nothing to settle, but the slots are the caller's to free.
		if rerr := s.cfg.Limiter.Release(r.Context(), slots); rerr != nil {
			fail(w, answer.StoreError, "%v", rerr)
			return
		}
	}
	switch {
	case errors.Is(err, book.ErrUnknown):
		fail(w, answer.UnknownLease, "no lease %.64q (never issued, or older than --lease-window)", req.ReceiptID)
		return
	case errors.Is(err, book.ErrDropped):
		fail(w, answer.ReceiptDropped,
			"the receipt of lease %.64q was dropped: more than the --max-receipts cap were held (its cost stands as charged)", req.ReceiptID)
		return
	case errors.Is(err, book.ErrSettled):
		fail(w, answer.AlreadySettled, "lease %.64q was settled already (or took no cost)", req.ReceiptID)
		return
	case errors.As(err, &br):
		fail(w, answer.BadReceipt, "%v", br.err)
		return
	case err != nil:
		fail(w, answer.StoreError, "%v", err)
		return
	}
	if !req.Release {
		if err := s.cfg.Limiter.SettleCosts(r.Context(), rec, actual, req.ActualCosts); err != nil {
			fail(w, answer.StoreError, "%v", err)
			return
		}
		s.spentSettle(rec, actual, req.ActualCosts)
		writeJSON(w, http.StatusOK, map[string]bool{"settled": true})
		return
	}
	if err := s.cfg.Limiter.SettleRelease(r.Context(), rec, actual, req.ActualCosts, slots); err != nil {
		fail(w, answer.StoreError, "%v", err)
		return
	}
	s.spentSettle(rec, actual, req.ActualCosts)
	writeJSON(w, http.StatusOK, map[string]bool{"settled": true, "released": true})
}

// CostMap is a cost per limit name ("costs", "actual_costs"). In JSON each
// value must be a whole number: null, a fraction or a string is an error
// (encoding/json would read null as 0, a free request).
type CostMap map[string]int64

// UnmarshalJSON reads an object of whole numbers (or null for no map).
func (m *CostMap) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*m = nil
		return nil
	}
	out := make(CostMap, len(raw))
	for name, v := range raw {
		var n int64
		if string(v) == "null" {
			return fmt.Errorf("cost for limit %.40q is null, not a whole number", name)
		}
		if err := json.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("cost for limit %.40q is %.40s, not a whole number", name, v)
		}
		out[name] = n
	}
	*m = out
	return nil
}
