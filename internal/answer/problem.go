// Error answers: a Problem (an error code from the table with its message),
// the classification of a decision's errors, and the refusal in front of an
// application.

package answer

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// Problem is an error as every surface answers it.
type Problem struct {
	Status int    // HTTP status
	Code   Code   // the error code of the JSON body
	GRPC   uint32 // the gRPC status code
	Msg    string
	Limit  string // the limit named, for cost_exceeds_capacity
	// RetryAfter, when positive, is worth a Retry-After (e.g. the key cap
	// frees room then).
	RetryAfter time.Duration
}

// New is the Problem of code c with message msg: its HTTP status and gRPC
// code are c's in the table.
func New(c Code, msg string) Problem {
	return Problem{Status: c.Status(), Code: c, GRPC: c.GRPC(), Msg: msg}
}

// Errorf is New with a formatted message.
func Errorf(c Code, format string, args ...any) Problem {
	return New(c, fmt.Sprintf(format, args...))
}

// Classify maps a decision's error: a cost above a limit's capacity is
// cost_exceeds_capacity (retrying is useless), a per-limit cost naming a
// limit that does not apply unknown_limit, descriptors no limit applies to
// no_limit_applies, a class the policy does not list unknown_priority,
// an invalid cost bad_request, the key cap store_full
// (with the store's RetryAfter when it knows when room comes), anything
// else (the store failing) store_error; each with its status and gRPC code
// from the table.
func Classify(err error) Problem {
	var ce *limiter.CostError
	var fe *store.FullError
	var ue *limiter.UnknownLimitError
	switch {
	case errors.Is(err, limiter.ErrNoLimitApplies):
		return New(NoLimitApplies, plain(err))
	case errors.Is(err, policy.ErrUnknownPriority):
		return New(UnknownPriority, plain(err))
	case errors.Is(err, limiter.ErrMixedPriorities):
		return New(BadRequest, plain(err))
	case errors.As(err, &ue):
		p := New(UnknownLimit, plain(err))
		p.Limit = ue.Name
		return p
	case errors.As(err, &ce):
		p := Errorf(CostExceedsCapacity, "cost %d exceeds capacity %d of limit %q: it can never be admitted", ce.Cost, ce.Capacity, ce.Limit)
		p.Limit = ce.Limit
		return p
	case errors.Is(err, sluice.ErrCostExceedsCapacity):
		return New(CostExceedsCapacity, plain(err))
	case errors.Is(err, sluice.ErrInvalidCost):
		return New(BadRequest, plain(err))
	case errors.As(err, &fe):
		msg := fmt.Sprintf("key capacity reached: %d keys held (cap %d); new key %s refused", fe.Keys, fe.Cap, fe.Key)
		if fe.RetryAfter > 0 {
			msg += fmt.Sprintf("; room in about %d s", Seconds(fe.RetryAfter))
		}
		p := New(StoreFull, msg)
		p.RetryAfter = fe.RetryAfter
		return p
	case errors.Is(err, store.ErrFull):
		return New(StoreFull, plain(err))
	}
	return New(StoreError, "the limit store failed: "+plain(err))
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

// body is the JSON of every error answer.
type body struct {
	Error string `json:"error"`
	Code  Code   `json:"code"`
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
// forward-auth): rate_limited's status (429) with h's fields (Retry-After
// among them) and the body
// {"error": "rate limit exceeded", "code": "rate_limited", "retry_after_ms": N}.
func Refused(w http.ResponseWriter, h Headers, retryAfter time.Duration) {
	RefusedWith(w, RateLimited.Status(), h, retryAfter)
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
		Code         Code   `json:"code"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}{"rate limit exceeded", RateLimited, ms})
}
