// Package answer renders decisions and errors into answers (headers, HTTP
// statuses, JSON error codes, gRPC codes), once for every surface:
// the choice of a decision's most constraining limit, its RateLimit and
// RateLimit-Policy fields and Retry-After, and the mapping of errors to an
// HTTP status, an error code and a gRPC code. The HTTP middleware, the
// HTTP/JSON service and the Envoy RateLimitService all render through it,
// so the same decision reads the same everywhere.
//
// It depends on no gRPC package: gRPC codes are given by their number
// (google.golang.org/grpc/codes numbering).
package answer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
)

// Limit is one limit's part of a decision, as the fields describe it.
type Limit struct {
	Name string
	// Capacity is the most the limit admits at once (the policy's q).
	Capacity int64
	// Window is the time over which Capacity applies: a token bucket's time
	// to refill its capacity, a window's length (the policy's w).
	Window time.Duration
	// Remaining is the whole tokens (or requests) left.
	Remaining int64
	// Allowed tells whether the limit admits the request.
	Allowed bool
	// RetryAfter is the wait until a refused limit admits; ResetAfter the
	// time until an admitting one is full again.
	RetryAfter, ResetAfter time.Duration
	// Undescribed marks a limit the fields do not describe.
	Undescribed bool
}

// Tightest returns the index of ls's most constraining described limit: a
// refused one with the longest wait, else the one with the least remaining
// relative to its capacity (the first of equals); -1 when none is
// described.
func Tightest(ls []Limit) int {
	best := -1
	for i, l := range ls {
		if l.Undescribed || l.Capacity <= 0 {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := ls[best]
		switch {
		case !l.Allowed && (b.Allowed || l.RetryAfter > b.RetryAfter):
			best = i
		case l.Allowed && b.Allowed && float64(l.Remaining)/float64(l.Capacity) < float64(b.Remaining)/float64(b.Capacity):
			best = i
		}
	}
	return best
}

// Seconds is d in whole seconds, rounded up (the fields' and Retry-After's
// unit: waiting that long is always enough); 0 for d <= 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Fields returns the RateLimit-Policy and RateLimit field values
// (draft-ietf-httpapi-ratelimit-headers, structured-field syntax) for l:
// `"name";q=<capacity>;w=<window s>` and `"name";r=<remaining>;t=<s>`,
// where t is the seconds until l admits again (refused) or is full again
// (admitted), rounded up, and w at least 1.
func Fields(l Limit) (policy, rateLimit string) {
	var b [160]byte
	q := strconv.AppendQuote(b[:0], l.Name)
	n := len(q)
	p := strconv.AppendInt(append(strconv.AppendInt(append(q, ";q="...), l.Capacity, 10), ";w="...), max(Seconds(l.Window), 1), 10)
	policy = string(p)
	wait := l.ResetAfter
	if !l.Allowed {
		wait = l.RetryAfter
	}
	r := strconv.AppendInt(append(strconv.AppendInt(append(p[:n], ";r="...), max(l.Remaining, 0), 10), ";t="...), Seconds(wait), 10)
	return policy, string(r)
}

// Headers is a decision's header fields: RateLimit-Policy and RateLimit
// of its tightest limit (empty when none is described), and Retry-After
// (seconds, rounded up) when refused.
type Headers struct {
	Policy, RateLimit, RetryAfter string
}

// HeadersOf renders a decision over ls: allowed and, when refused, its
// wait.
func HeadersOf(ls []Limit, allowed bool, retryAfter time.Duration) Headers {
	var h Headers
	if i := Tightest(ls); i >= 0 {
		h.Policy, h.RateLimit = Fields(ls[i])
	}
	if !allowed {
		h.RetryAfter = strconv.FormatInt(Seconds(retryAfter), 10)
	}
	return h
}

// Set writes h into hdr (leaving out what is empty).
func (h Headers) Set(hdr http.Header) {
	if h.Policy != "" {
		hdr.Set("RateLimit-Policy", h.Policy)
		hdr.Set("RateLimit", h.RateLimit)
	}
	if h.RetryAfter != "" {
		hdr.Set("Retry-After", h.RetryAfter)
	}
}

// FromStatus describes a limiter status.
func FromStatus(st limiter.LimitStatus) Limit {
	l := Limit{Name: st.Name, Capacity: st.Capacity, Remaining: st.TokensRemaining, Allowed: st.Allowed,
		RetryAfter: st.RetryAfter, ResetAfter: st.ResetAfter, Window: st.Window}
	if st.RefillPerSecond > 0 {
		l.Window = time.Duration(float64(st.Capacity) / st.RefillPerSecond * 1e9)
	}
	// An in-flight cap is described too (q = max_in_flight, w = its
	// lease_ttl, r = free slots): when it is the one refusing, the fields
	// must name it.
	return l
}

// FromResult describes a limiter result's limits, appending to dst.
func FromResult(dst []Limit, res limiter.Result) []Limit {
	for _, st := range res.Limits {
		dst = append(dst, FromStatus(st))
	}
	return dst
}

// OfResult renders a limiter result's header fields.
func OfResult(res limiter.Result) Headers {
	var buf [8]Limit
	return HeadersOf(FromResult(buf[:0], res), res.Allowed, res.RetryAfter)
}

// gRPC codes by number (google.golang.org/grpc/codes).
const (
	GRPCInvalidArgument   = 3
	GRPCResourceExhausted = 8
	GRPCUnavailable       = 14
	GRPCInternal          = 13
)

// Problem is an error as every surface answers it.
type Problem struct {
	Status int    // HTTP status
	Code   string // the error code of the JSON body
	GRPC   uint32 // the gRPC status code
	Msg    string
	Limit  string // the limit named, for cost_exceeds_capacity
	// RetryAfter, when positive, is worth a Retry-After (e.g. the key cap
	// frees room then).
	RetryAfter time.Duration
}

// Classify maps a decision's error: a cost above a limit's capacity is 422
// cost_exceeds_capacity (retrying is useless), a per-limit cost naming a
// limit that does not apply 400 unknown_limit, an invalid cost 400
// bad_request, the key cap 503 store_full (with the store's RetryAfter
// when it knows when room comes), anything else (the store failing) 503
// store_error.
func Classify(err error) Problem {
	var ce *limiter.CostError
	var fe *store.FullError
	var ue *limiter.UnknownLimitError
	switch {
	case errors.Is(err, limiter.ErrNoLimitApplies):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "no_limit_applies", GRPC: GRPCInvalidArgument, Msg: plain(err)}
	case errors.As(err, &ue):
		return Problem{Status: http.StatusBadRequest, Code: "unknown_limit", GRPC: GRPCInvalidArgument, Msg: plain(err), Limit: ue.Name}
	case errors.As(err, &ce):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "cost_exceeds_capacity", GRPC: GRPCInvalidArgument,
			Msg: fmt.Sprintf("cost %d exceeds capacity %d of limit %q: it can never be admitted", ce.Cost, ce.Capacity, ce.Limit), Limit: ce.Limit}
	case errors.Is(err, sluice.ErrCostExceedsCapacity):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "cost_exceeds_capacity", GRPC: GRPCInvalidArgument, Msg: plain(err)}
	case errors.Is(err, sluice.ErrInvalidCost):
		return Problem{Status: http.StatusBadRequest, Code: "bad_request", GRPC: GRPCInvalidArgument, Msg: plain(err)}
	case errors.As(err, &fe):
		msg := fmt.Sprintf("key capacity reached: %d keys held (cap %d); new key %s refused", fe.Keys, fe.Cap, fe.Key)
		if fe.RetryAfter > 0 {
			msg += fmt.Sprintf("; room in about %d s", Seconds(fe.RetryAfter))
		}
		return Problem{Status: http.StatusServiceUnavailable, Code: "store_full", GRPC: GRPCResourceExhausted, Msg: msg, RetryAfter: fe.RetryAfter}
	case errors.Is(err, store.ErrFull):
		return Problem{Status: http.StatusServiceUnavailable, Code: "store_full", GRPC: GRPCResourceExhausted, Msg: plain(err)}
	}
	return Problem{Status: http.StatusServiceUnavailable, Code: "store_error", GRPC: GRPCUnavailable, Msg: "the limit store failed: " + plain(err)}
}

// plain is err's message without the package prefixes of the layers it
// went through ("limiter: store: ..." reads "...").
func plain(err error) string {
	msg := err.Error()
	for {
		trimmed := msg
		for _, p := range []string{"limiter: ", "store: ", "sluice: ", "redisstore: ", "failover: "} {
			trimmed = strings.TrimPrefix(trimmed, p)
		}
		if trimmed == msg {
			return msg
		}
		msg = trimmed
	}
}

// Errorf is a Problem with a formatted message.
func Errorf(status int, code, format string, args ...any) Problem {
	return Problem{Status: status, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// body is the JSON of every error answer.
type body struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Limit string `json:"limit,omitempty"`
}

// Write answers p as JSON {"error", "code"[, "limit"]} with its status
// (and Retry-After when p has one).
func (p Problem) Write(w http.ResponseWriter) {
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(Seconds(p.RetryAfter), 10))
	}
	WriteJSON(w, p.Status, body{Error: p.Msg, Code: p.Code, Limit: p.Limit})
}

// Refused answers a refusal in front of an application (middleware,
// forward-auth): 429 with h's fields (Retry-After among them) and the body
// {"error": "rate limit exceeded", "code": "rate_limited", "retry_after_ms": N}.
func Refused(w http.ResponseWriter, h Headers, retryAfter time.Duration) {
	RefusedWith(w, http.StatusTooManyRequests, h, retryAfter)
}

// RefusedWith is Refused with another status (a proxy that passes only
// some statuses from its auth service, as nginx's auth_request).
func RefusedWith(w http.ResponseWriter, status int, h Headers, retryAfter time.Duration) {
	h.Set(w.Header())
	ms := int64(0)
	if retryAfter > 0 {
		ms = int64((retryAfter + time.Millisecond - 1) / time.Millisecond)
	}
	WriteJSON(w, status, struct {
		Error        string `json:"error"`
		Code         string `json:"code"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}{"rate limit exceeded", "rate_limited", ms})
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
