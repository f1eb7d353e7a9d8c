// Package httplimit is sluice's HTTP glue. Its client half, NewTransport,
// paces outgoing requests through a gate.Gate and honours servers' retry
// hints (429 and 503 with Retry-After or RateLimit fields).
package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	base     http.RoundTripper
	g        *gate.Gate
	cost     func(*http.Request) int64
	maxHint  time.Duration
	estimate func(*http.Request) int64
	usage    func(*http.Response) (int64, bool)
}

// WithTokenEstimate charges each request's estimated tokens (f's result)
// to the gate's "tokens" dimension before it is sent (gate.Charge); the
// gate must have that dimension. The request then holds its in-flight slot
// until its response body is closed (a streaming answer keeps it while it
// streams), and a 429 or 503 that is retried is settled at 0 tokens.
func WithTokenEstimate(f func(*http.Request) int64) TransportOption {
	return func(t *transport) { t.estimate = f }
}

// WithTokenUsage settles the estimate (WithTokenEstimate) with the tokens
// the answer says were used: f is called on the final response before it
// is returned; when it reports ok, the "tokens" charge is settled to that
// (the unused part returned exactly, an excess charged as debt). f must
// leave the body readable for the caller (UsageFromJSON does).
func WithTokenUsage(f func(*http.Response) (int64, bool)) TransportOption {
	return func(t *transport) { t.usage = f }
}

// NewTransport returns a RoundTripper that sends every request through g
// (tokens, in-flight slot, queue; see gate.Gate.Do) and then base (nil
// means http.DefaultTransport).
//
// A 429 or 503 answer becomes a server hint, the longest of those it
// carries (RetryHint): Retry-After (delta-seconds or HTTP-date),
// retry-after-ms, the RateLimit field's reset time for an exhausted policy
// (`RateLimit: "default";r=0;t=30`), RateLimit-Remaining: 0 with
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
	var cs []gate.Ceiling
	var pauses []ProviderLimit
	for _, l := range ParseProviderLimits(h) {
		if l.Dimension == "" || l.Remaining < 0 {
			continue
		}
		cs = append(cs, gate.Ceiling{Dimension: l.Dimension, Remaining: l.Remaining})
		if l.Remaining == 0 && l.Reset > 0 {
			pauses = append(pauses, l)
		}
	}
	if len(cs) == 0 {
		return
	}
	unknown := t.g.LowerAll(cs) // (one store call for a shared gate)
	for _, l := range pauses {
		if !slices.Contains(unknown, l.Dimension) {
			t.g.PauseDimension(l.Dimension, min(l.Reset, t.maxHint))
		}
	}
}

// attemptRequest is the request to send for attempt n: req itself first,
// then a clone with its body rewound (GetBody).
func attemptRequest(ctx context.Context, req *http.Request, n int) (*http.Request, error) {
	if n <= 1 {
		return req, nil
	}
	r := req.Clone(ctx)
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("httplimit: rewinding the request body: %w", err)
		}
		r.Body = body
	}
	return r, nil
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
	if t.estimate != nil {
		return t.roundTripTokens(req)
	}
	canRetry := idempotent(req) && rewindable(req)
	attempts := max(t.g.Config().Retry.MaxAttempts, 1)
	var resp *http.Response
	attempt := 0
	err := t.g.Do(req.Context(), t.cost(req), func(ctx context.Context) error {
		attempt++
		r, err := attemptRequest(ctx, req, attempt)
		if err != nil {
			return err
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

// roundTripTokens is RoundTrip with a token estimate: each attempt reserves
// its request cost and its estimated tokens (waiting as Do does), a retried
// 429/503 is settled at 0 tokens and released, and the final answer keeps
// its ticket until its body is closed, settled by WithTokenUsage.
func (t *transport) roundTripTokens(req *http.Request) (*http.Response, error) {
	canRetry := idempotent(req) && rewindable(req)
	attempts := max(t.g.Config().Retry.MaxAttempts, 1)
	est := t.estimate(req)
	for attempt := 1; ; attempt++ {
		tk, err := t.g.Reserve(req.Context(), t.cost(req), gate.Charge("tokens", est), gate.RetryAttempt(attempt))
		if err != nil {
			if req.Body != nil && attempt == 1 {
				req.Body.Close()
			}
			return nil, err
		}
		r, err := attemptRequest(req.Context(), req, attempt)
		if err != nil {
			tk.SettleCharge("tokens", 0)
			tk.Release()
			return nil, err
		}
		res, err := t.base.RoundTrip(r)
		if err != nil {
			tk.SettleCharge("tokens", 0) // (nothing reached the provider, as far as is known)
			tk.Release()
			return nil, err
		}
		t.follow(res.Header)
		if res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable {
			hint, hinted := RetryHint(res.Header, time.Now(), t.maxHint)
			if hinted {
				t.g.Pause(hint)
			}
			if canRetry && attempt < attempts {
				io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
				res.Body.Close()
				tk.SettleCharge("tokens", 0) // refused: no tokens used
				tk.Release()
				// the gate's retry policy: counted, jittered, no sooner than a hint
				if err := t.g.BeforeRetry(req.Context(), attempt+1, &StatusError{StatusCode: res.StatusCode, Status: res.Status}); err != nil {
					return nil, err
				}
				continue
			}
			tk.SettleCharge("tokens", 0)
		} else if t.usage != nil {
			if used, ok := t.usage(res); ok {
				tk.SettleCharge("tokens", max(used, 0))
			}
		}
		res.Body = &releaseOnClose{ReadCloser: res.Body, release: tk.Release}
		return res, nil
	}
}

// releaseOnClose releases a ticket when the body is closed (once).
type releaseOnClose struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releaseOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// UsageFromJSON reads the tokens an OpenAI or Anthropic answer says it
// used, from its JSON body's "usage" (OpenAI: total_tokens, else
// prompt_tokens + completion_tokens; Anthropic: input_tokens +
// output_tokens), for WithTokenUsage. It reads a body whose Content-Type
// is JSON (at most 8 MiB) and puts it back, so the caller reads it whole;
// any other body (a streamed answer, an error page) is left unread, false.
func UsageFromJSON(res *http.Response) (int64, bool) {
	if res.Body == nil || res.Body == http.NoBody {
		return 0, false
	}
	// Only a JSON body is read ahead: a stream (text/event-stream) is left
	// to the caller, unread.
	if ct := strings.ToLower(res.Header.Get("Content-Type")); !strings.Contains(ct, "json") {
		return 0, false
	}
	const max = 8 << 20
	b, err := io.ReadAll(io.LimitReader(res.Body, max+1))
	rest := res.Body
	res.Body = &readBack{Reader: io.MultiReader(bytes.NewReader(b), rest), closer: rest}
	if err != nil || len(b) > max {
		return 0, false
	}
	var v struct {
		Usage *struct {
			TotalTokens      *int64 `json:"total_tokens"`
			PromptTokens     *int64 `json:"prompt_tokens"`
			CompletionTokens *int64 `json:"completion_tokens"`
			InputTokens      *int64 `json:"input_tokens"`
			OutputTokens     *int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil {
		return 0, false
	}
	u := v.Usage
	val := func(p *int64) int64 {
		if p == nil || *p < 0 {
			return 0
		}
		return *p
	}
	switch {
	case u.TotalTokens != nil:
		return val(u.TotalTokens), true
	case u.PromptTokens != nil || u.CompletionTokens != nil:
		return val(u.PromptTokens) + val(u.CompletionTokens), true
	case u.InputTokens != nil || u.OutputTokens != nil:
		return val(u.InputTokens) + val(u.OutputTokens), true
	}
	return 0, false
}

// readBack is a body read ahead and put back.
type readBack struct {
	io.Reader
	closer io.Closer
}

func (r *readBack) Close() error { return r.closer.Close() }
