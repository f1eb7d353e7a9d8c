// Package httplimit is sluice's HTTP glue. Its client half, NewTransport,
// paces outgoing requests through a gate.Gate and honours servers' retry
// hints (429 and 503 with Retry-After or RateLimit fields).
package httplimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/gate"
)

// TransportOption configures NewTransport.
type TransportOption func(*transport)

// WithCost sets the cost of each request (default 1). The function must
// return a cost between 0 and the gate's capacity; other costs are refused
// by the gate with its cost errors.
func WithCost(f func(*http.Request) int64) TransportOption {
	return func(t *transport) { t.cost = f }
}

// WithMaxRetryAfter caps the retry hints servers can impose (default
// DefaultMaxRetryAfter). A longer hint counts as d.
func WithMaxRetryAfter(d time.Duration) TransportOption {
	return func(t *transport) { t.maxHint = max(d, 0) }
}

// StatusError is the error a retried 429 or 503 answer becomes inside the
// gate (it is seen only in the error NewTransport's RoundTrip returns when
// the gate refuses a retry).
type StatusError struct {
	StatusCode int
	Status     string
}

func (e *StatusError) Error() string { return "httplimit: server answered " + e.Status }

type transport struct {
	base    http.RoundTripper
	g       *gate.Gate
	cost    func(*http.Request) int64
	maxHint time.Duration
}

// NewTransport returns a RoundTripper that sends every request through g
// (tokens, in-flight slot, queue; see gate.Gate.Do) and then base (nil
// means http.DefaultTransport).
//
// A 429 or 503 answer becomes a server hint: Retry-After (delta-seconds or
// HTTP-date), else the RateLimit field's reset time for an exhausted policy
// (`RateLimit: "default";r=0;t=30`), else RateLimit-Remaining: 0 with
// RateLimit-Reset; malformed values are ignored and hints are capped (see
// WithMaxRetryAfter). The hint pauses the whole gate. Idempotent requests
// (GET, HEAD, OPTIONS, PUT, DELETE, TRACE, or any request with an
// Idempotency-Key header) whose body can be rewound (no body, or GetBody
// set) are retried within the gate's Retry policy, no sooner than the hint;
// otherwise, and after the last attempt, the server's answer is returned as
// it came. Errors from the gate (sluice.ErrQueueFull, ErrWaitTooLong, cost
// errors) and from base are returned as the RoundTrip error.
//
// Every answer's own rate-limit headers (ParseProviderLimits: OpenAI's,
// Anthropic's, the IETF fields, RateLimit-* and X-RateLimit-*) also adjust
// the gate: a budget the provider counts lower than the gate ("requests",
// or a gate Dimension of the same name: "tokens", "input_tokens", ...) is
// lowered to the provider's figure, never raised; one with nothing left and
// a reset is paused until the reset (gate.PauseDimension).
func NewTransport(base http.RoundTripper, g *gate.Gate, opts ...TransportOption) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &transport{base: base, g: g, cost: func(*http.Request) int64 { return 1 }, maxHint: DefaultMaxRetryAfter}
	for _, o := range opts {
		o(t)
	}
	return t
}

// follow applies what a response says of the provider's own limits
// (ParseProviderLimits) to the gate, on every answer: a budget the
// provider counts lower than the gate is lowered to the provider's figure
// (never raised: another client may share the key); one with nothing left
// and a reset is paused until the reset (capped like hints). Budgets are
// "requests" (the gate's Limit) and the gate's Dimensions by name; others
// are ignored. Retry hints are left to the 429/503 handling.
func (t *transport) follow(h http.Header) {
	for _, l := range ParseProviderLimits(h) {
		if l.Dimension == "" || l.Remaining < 0 {
			continue
		}
		if !t.g.Lower(l.Dimension, l.Remaining) {
			continue
		}
		if l.Remaining == 0 && l.Reset > 0 {
			t.g.PauseDimension(l.Dimension, min(l.Reset, t.maxHint))
		}
	}
}

func idempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace, "":
		return true
	}
	return r.Header.Get("Idempotency-Key") != ""
}

func rewindable(r *http.Request) bool {
	return r.Body == nil || r.Body == http.NoBody || r.GetBody != nil
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	canRetry := idempotent(req) && rewindable(req)
	attempts := max(t.g.Config().Retry.MaxAttempts, 1)
	var resp *http.Response
	attempt := 0
	err := t.g.Do(req.Context(), t.cost(req), func(ctx context.Context) error {
		attempt++
		r := req
		if attempt > 1 {
			r = req.Clone(ctx)
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return fmt.Errorf("httplimit: rewinding the request body: %w", err)
				}
				r.Body = body
			}
		}
		res, err := t.base.RoundTrip(r)
		if err != nil {
			return err
		}
		t.follow(res.Header)
		if res.StatusCode != http.StatusTooManyRequests && res.StatusCode != http.StatusServiceUnavailable {
			resp = res
			return nil
		}
		hint, hinted := RetryHint(res.Header, time.Now(), t.maxHint)
		if canRetry && attempt < attempts {
			// Another attempt will follow: drop this answer.
			io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
			serr := &StatusError{StatusCode: res.StatusCode, Status: res.Status}
			if hinted {
				return gate.WithRetryAfter(serr, hint)
			}
			return gate.Retryable(serr)
		}
		// The last answer goes back to the caller, and its hint still
		// pauses the gate for everyone else.
		if hinted {
			t.g.Pause(hint)
		}
		resp = res
		return nil
	})
	if err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		if req.Body != nil && attempt == 0 {
			req.Body.Close() // RoundTrip must close the body even when not sending
		}
		return nil, err
	}
	return resp, nil
}
