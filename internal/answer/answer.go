// Package answer renders decisions and errors into answers (headers, HTTP
// statuses, JSON error codes, gRPC codes), once for every surface:
// the choice of a decision's most constraining limit, its RateLimit and
// RateLimit-Policy fields and Retry-After, and the error table: every
// error code (Code) with its HTTP status and gRPC code (Table, Problem).
// The HTTP middleware, the HTTP/JSON service, forward-auth and the Envoy
// RateLimitService all render through it, so the same decision and the
// same error read the same everywhere.
//
// It depends on no gRPC package: gRPC codes are given by their number
// (google.golang.org/grpc/codes numbering).
package answer

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/limiter"
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

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
