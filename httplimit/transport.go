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
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/policy"
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
	overload func(*http.Response) bool        // WithOverloadClassifier; nil: IsOverload
	prices   *policy.Prices                   // WithPrices (httplimit/spend.go)
	usageEst func(*http.Request) policy.Usage // WithUsageEstimate
}

// WithTokenEstimate charges each request's estimated tokens (f's result)
// to the gate's "tokens" dimension before it is sent (gate.Charge); the
// gate must have that dimension. A 429 or 503 that is retried is settled
// at 0 tokens. The in-flight slot is held as without an estimate (see
// NewTransport): until the returned body ends.
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
// A request holds its in-flight slot (gate.Config.MaxInFlight) from its
// admission until the body of the answer RoundTrip returns ends: the body
// is closed, a Read of it returns an error (io.EOF at its end), or the
// request's context ends; an answer without a body (http.NoBody: a HEAD,
// a 204) frees it before RoundTrip returns. A streaming answer
// (text/event-stream) thus keeps its slot while it streams, with or
// without WithTokenEstimate. When Close (or the Read that ends the body)
// returns, the slot is free. An attempt that gets no answer (an error or a
// panic of base, a request body that cannot be rewound) and a 429 or 503
// that is retried free theirs at once. Close every body, as net/http
// requires: a body never closed nor read to its end holds its slot until
// the request's context ends.
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
// a reset is paused until the reset (gate.PauseDimension). With a token
// estimate and a shared gate (gate.Config.Store), an answer whose usage
// WithTokenUsage reads has its settle, its ceilings and the release of its
// ticket sent together when its body ends (gate.Ticket.Finish: one store
// call, so that a call costs the store two: its booking and that); a
// stream's ceilings are applied at once.
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
	if cs := t.ceilings(h); len(cs) > 0 {
		t.g.LowerAll(cs) // (one store call for a shared gate)
	}
}

// ceilings applies the pauses of a response's provider limits (a budget
// with nothing left and a reset, capped like hints) and returns its
// ceilings, for follow or, with a ticket's settle and release, Finish.
func (t *transport) ceilings(h http.Header) []gate.Ceiling {
	var cs []gate.Ceiling
	for _, l := range ParseProviderLimits(h) {
		if l.Dimension == "" || l.Remaining < 0 {
			continue
		}
		cs = append(cs, gate.Ceiling{Dimension: l.Dimension, Remaining: l.Remaining})
		if l.Remaining == 0 && l.Reset > 0 {
			t.g.PauseDimension(l.Dimension, min(l.Reset, t.maxHint)) // (false, nothing done, for a budget the gate lacks)
		}
	}
	return cs
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
	req = t.withTraceParent(req) // (a traced gate: its span joins the request's trace)
	if t.estimate != nil || t.prices != nil {
		return t.roundTripTokens(req)
	}
	return t.roundTripDo(req)
}

// send makes attempt n of req through base and applies the answer's
// provider headers to the gate.
func (t *transport) send(req *http.Request, n int) (*http.Response, error) {
	res, err := t.sendOnly(req, n)
	if err != nil {
		return nil, err
	}
	t.follow(res.Header)
	return res, nil
}

// sendOnly makes attempt n of req through base.
func (t *transport) sendOnly(req *http.Request, n int) (*http.Response, error) {
	r, err := attemptRequest(req.Context(), req, n)
	if err != nil {
		return nil, err
	}
	return t.base.RoundTrip(r)
}

// refused reports whether an answer is a 429 or 503 (a retry hint's
// answer).
func refused(res *http.Response) bool {
	return res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable
}

// drop reads a little of an answer that will not be returned (so that its
// connection can be reused) and closes it.
func drop(res *http.Response) {
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
}

// doAnswer is what roundTripDo's call hands back: the answer, Do's error,
// or a panic of base.
type doAnswer struct {
	res      *http.Response
	err      error
	panicked bool
	value    any
}

// roundTripDo is RoundTrip without a token estimate: the call runs in g.Do
// (its retries, pauses and refusals) on a goroutine of its own, and the
// attempt whose answer is returned keeps Do's in-flight slot until the
// answer's body ends (holdUntilEnd), when Do returns and the goroutine
// ends. The body's end returns once the slot is free.
func (t *transport) roundTripDo(req *http.Request) (*http.Response, error) {
	canRetry := idempotent(req) && rewindable(req)
	attempts := max(t.g.Config().Retry.MaxAttempts, 1)
	got := make(chan doAnswer, 1)
	freed := make(chan struct{}) // closed once Do has returned (its slot freed)
	attempt := 0
	go func() {
		defer close(freed)
		handed := false
		defer func() {
			if !handed {
				if p := recover(); p != nil {
					got <- doAnswer{panicked: true, value: p} // re-panicked on the caller's goroutine
				}
			}
		}()
		var bodiless *http.Response
		err := t.g.Do(req.Context(), t.cost(req), func(ctx context.Context) error {
			attempt++
			res, err := t.send(req, attempt)
			if err != nil {
				return err
			}
			t.feedback(res) // (an adaptive gate learns from overloads)
			if refused(res) {
				hint, hinted := RetryHint(res.Header, time.Now(), t.maxHint)
				if canRetry && attempt < attempts {
					// Another attempt will follow: drop this answer.
					drop(res)
					serr := &StatusError{StatusCode: res.StatusCode, Status: res.Status}
					if hinted {
						return gate.WithRetryAfter(serr, hint)
					}
					return gate.Retryable(serr)
				}
				// The last answer goes back to the caller, and its hint
				// still pauses the gate for everyone else.
				if hinted {
					t.g.Pause(hint)
				}
			}
			if res.Body == nil || res.Body == http.NoBody {
				bodiless = res // nothing to hold: returned once Do has freed the slot
				return nil
			}
			ended := make(chan struct{})
			holdUntilEnd(req.Context(), res, func() {
				close(ended)
				<-freed
			})
			handed = true
			got <- doAnswer{res: res}
			<-ended // Do holds the slot until the body ends
			return nil
		})
		if !handed {
			got <- doAnswer{res: bodiless, err: err}
		}
	}()
	a := <-got
	if a.panicked {
		panic(a.value)
	}
	if a.err != nil {
		if req.Body != nil && attempt == 0 {
			req.Body.Close() // RoundTrip must close the body even when not sending
		}
		return nil, a.err
	}
	return a.res, nil
}

// roundTripTokens is RoundTrip with a token estimate: each attempt reserves
// its request cost and its estimated tokens (waiting as Do does), a retried
// 429/503 is settled at 0 tokens and released, and the final answer keeps
// its ticket until its body ends (holdUntilEnd), settled by WithTokenUsage.
func (t *transport) roundTripTokens(req *http.Request) (*http.Response, error) {
	canRetry := idempotent(req) && rewindable(req)
	attempts := max(t.g.Config().Retry.MaxAttempts, 1)
	var est, micro int64
	if t.estimate != nil {
		est = t.estimate(req)
	}
	var spend policy.Usage // (WithPrices: the estimate, priced as micro)
	if t.prices != nil {
		var err error
		if spend, micro, err = t.spendEstimate(req, est); err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
	}
	var last error
	for attempt := 1; ; attempt++ {
		tk, err := t.g.Reserve(req.Context(), t.cost(req), t.charges(est, micro, attempt)...)
		if err != nil {
			if req.Body != nil && attempt == 1 {
				req.Body.Close()
			}
			if last != nil {
				return nil, fmt.Errorf("%w (last attempt: %w)", err, last) // as Do reports a refused retry
			}
			return nil, err
		}
		res, err := t.sendHolding(req, attempt, tk)
		if err != nil {
			return nil, err
		}
		t.feedback(res) // (an adaptive gate learns from overloads)
		// For a shared gate the settle, the provider's ceilings and the
		// release go to the gate together (tk.Finish: one store call),
		// once the answer's body ends; an answer whose usage is not known
		// then (a stream) has its ceilings applied at once. A gate in
		// process settles and lowers at once.
		cs := t.ceilings(res.Header)
		settle := t.zeroSettle() // refused: no tokens used
		if refused(res) {
			hint, hinted := RetryHint(res.Header, time.Now(), t.maxHint)
			if hinted {
				t.g.Pause(hint)
			}
			if canRetry && attempt < attempts {
				drop(res)
				finish(tk, settle, cs)
				last = &StatusError{StatusCode: res.StatusCode, Status: res.Status}
				// the gate's retry policy: counted, jittered, no sooner than a hint
				if err := t.g.BeforeRetry(req.Context(), attempt+1, last); err != nil {
					return nil, err
				}
				continue
			}
		} else {
			settle = t.usedSettle(res, spend) // (nil: the usage is not known)
		}
		if shared := t.g.Config().Store != nil; !shared || settle == nil {
			if len(cs) > 0 {
				t.g.LowerAll(cs)
				cs = nil
			}
			for name, n := range settle {
				tk.SettleCharge(name, n)
			}
			settle = nil
		}
		holdUntilEnd(req.Context(), res, func() { finish(tk, settle, cs) })
		return res, nil
	}
}

// finish ends a ticket (gate.Ticket.Finish), releasing it even when a
// settle is refused.
func finish(tk *gate.Ticket, settle map[string]int64, cs []gate.Ceiling) {
	if tk.Finish(settle, cs) != nil {
		tk.Release() // (a no-op when Finish released it)
	}
}

// usedTokens is WithTokenUsage's count of an answer, false without one.
func (t *transport) usedTokens(res *http.Response) (int64, bool) {
	if t.usage == nil {
		return 0, false
	}
	return t.usage(res)
}

// sendHolding is sendOnly for a reserved attempt: when no answer comes (an
// error, or a panic of base) the ticket is settled at 0 tokens (nothing
// reached the provider, as far as is known) and released.
func (t *transport) sendHolding(req *http.Request, n int, tk *gate.Ticket) (res *http.Response, err error) {
	answered := false
	defer func() {
		if !answered {
			finish(tk, t.zeroSettle(), nil)
		}
	}()
	res, err = t.sendOnly(req, n)
	answered = err == nil
	return res, err
}

// holdUntilEnd arranges for release to run once, when res's body ends: it
// is closed, a Read of it returns an error (io.EOF at its end), or ctx
// ends (the transport then abandons the body). A response without a body
// (nil or http.NoBody) ends at once.
func holdUntilEnd(ctx context.Context, res *http.Response, release func()) {
	if res.Body == nil || res.Body == http.NoBody {
		release()
		return
	}
	b := &releaseOnEnd{ReadCloser: res.Body, release: release}
	b.stop = context.AfterFunc(ctx, b.end)
	if w, ok := res.Body.(io.ReadWriteCloser); ok {
		res.Body = &releaseOnEndRW{releaseOnEnd: b, w: w} // a 101 Switching Protocols body stays writable
		return
	}
	res.Body = b
}

// releaseOnEnd is a response body that runs release once, at its end.
type releaseOnEnd struct {
	io.ReadCloser
	once    sync.Once
	release func()
	stop    func() bool // unregisters end from the request's context
}

// end runs release (once): from the context's AfterFunc, or finish.
func (b *releaseOnEnd) end() { b.once.Do(b.release) }

// finish is end from the body's own Read or Close.
func (b *releaseOnEnd) finish() {
	b.stop()
	b.end()
}

func (b *releaseOnEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.finish()
	}
	return n, err
}

func (b *releaseOnEnd) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// releaseOnEndRW is releaseOnEnd for a body that can be written.
type releaseOnEndRW struct {
	*releaseOnEnd
	w io.Writer
}

func (b *releaseOnEndRW) Write(p []byte) (int, error) { return b.w.Write(p) }

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
