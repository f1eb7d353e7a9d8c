// Spend through the transport: WithPrices charges a gate's "usd"
// dimension with each call's estimated price and settles it with the
// price of the usage its answer reports (UsageOf).

package httplimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/policy"
)

// SpendDimension is the gate dimension WithPrices charges: micro-dollars
// (gate.Dimension{Name: "usd", Limit: bucket.Limit{Capacity: 5_000_000,
// Rate: ...}} is a $5 budget).
const SpendDimension = "usd"

// WithPrices makes the transport charge each request's estimated spend,
// in micro-dollars at these prices (policy.Prices, exact), to the gate's
// "usd" dimension (SpendDimension; the gate must have it) before it is
// sent, all or nothing with the gate's other budgets, and settle it with
// the exact price of the usage the answer reports (UsageOf: OpenAI's and
// Anthropic's JSON "usage"; the unused part returned, an excess charged
// into debt). A request's estimate is WithUsageEstimate's, else read from
// the request (requestUsage). A model without a price (and no
// Default) fails the request before it is sent, with an error matching
// policy.ErrUnknownModel. A 429 or 503 that is retried, and an attempt
// that gets no answer, are settled at 0; an answer whose usage cannot be
// read (a stream, an error page) keeps the estimate as charged.
func WithPrices(p *policy.Prices) TransportOption {
	return func(t *transport) { t.prices = p }
}

// WithUsageEstimate gives WithPrices each request's estimate: its model,
// its input tokens and its max output tokens (in OutputTokens).
func WithUsageEstimate(f func(*http.Request) policy.Usage) TransportOption {
	return func(t *transport) { t.usageEst = f }
}

// MaxEstimatedBody bounds the request body requestUsage reads (8 MiB).
const MaxEstimatedBody = 8 << 20

// requestUsage is a request's estimate without WithUsageEstimate, from
// its JSON body (read through GetBody, so the request is unchanged): the
// model from "model"; the max output tokens from "max_completion_tokens",
// "max_tokens" or "max_output_tokens" (0 when none is given); the input
// tokens from WithTokenEstimate's estimate tokens less those max output
// tokens, else one token per 4 bytes of the body (rounded up). A body it
// cannot read gives an empty model.
func requestUsage(req *http.Request, tokens int64, hasTokens bool) policy.Usage {
	var u policy.Usage
	if req.GetBody == nil {
		return u
	}
	body, err := req.GetBody()
	if err != nil {
		return u
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, MaxEstimatedBody+1))
	if err != nil || len(b) > MaxEstimatedBody {
		return u
	}
	var v struct {
		Model               string `json:"model"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxOutputTokens     *int64 `json:"max_output_tokens"`
	}
	if json.Unmarshal(b, &v) != nil {
		return u
	}
	u.Model = v.Model
	for _, p := range []*int64{v.MaxCompletionTokens, v.MaxTokens, v.MaxOutputTokens} {
		if p != nil && *p > 0 {
			u.OutputTokens = min(*p, policy.MaxUsageTokens)
			break
		}
	}
	if hasTokens {
		u.InputTokens = max(tokens-u.OutputTokens, 0)
	} else {
		u.InputTokens = (int64(len(b)) + 3) / 4
	}
	u.InputTokens = min(u.InputTokens, policy.MaxUsageTokens)
	return u
}

// UsageOf reads the usage an OpenAI or Anthropic answer reports in its
// JSON body's "usage", with the answer's "model": OpenAI's prompt_tokens
// (of which prompt_tokens_details.cached_tokens cached) and
// completion_tokens, or input_tokens and output_tokens (the Responses
// API, with input_tokens_details.cached_tokens); Anthropic's input_tokens
// plus cache_read_input_tokens and cache_creation_input_tokens (the
// cache reads counted as cached input) and output_tokens. As
// UsageFromJSON, it reads a JSON body (at most 8 MiB) and puts it back;
// any other body is left unread, false.
func UsageOf(res *http.Response) (policy.Usage, bool) {
	var u policy.Usage
	if res.Body == nil || res.Body == http.NoBody {
		return u, false
	}
	if ct := strings.ToLower(res.Header.Get("Content-Type")); !strings.Contains(ct, "json") {
		return u, false
	}
	const max = 8 << 20
	b, err := io.ReadAll(io.LimitReader(res.Body, max+1))
	rest := res.Body
	res.Body = &readBack{Reader: io.MultiReader(bytes.NewReader(b), rest), closer: rest}
	if err != nil || len(b) > max {
		return u, false
	}
	type cached struct {
		CachedTokens int64 `json:"cached_tokens"`
	}
	var v struct {
		Model string `json:"model"`
		Usage *struct {
			PromptTokens             *int64  `json:"prompt_tokens"`
			CompletionTokens         *int64  `json:"completion_tokens"`
			PromptTokensDetails      *cached `json:"prompt_tokens_details"`
			InputTokens              *int64  `json:"input_tokens"`
			OutputTokens             *int64  `json:"output_tokens"`
			InputTokensDetails       *cached `json:"input_tokens_details"`
			CacheReadInputTokens     int64   `json:"cache_read_input_tokens"`
			CacheCreationInputTokens int64   `json:"cache_creation_input_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil {
		return u, false
	}
	n := func(p *int64) int64 {
		if p == nil || *p < 0 {
			return 0
		}
		return min(*p, policy.MaxUsageTokens)
	}
	us := v.Usage
	u.Model = v.Model
	switch {
	case us.PromptTokens != nil || us.CompletionTokens != nil:
		u.InputTokens, u.OutputTokens = n(us.PromptTokens), n(us.CompletionTokens)
		if d := us.PromptTokensDetails; d != nil {
			u.CachedInputTokens = n(&d.CachedTokens)
		}
	case us.InputTokens != nil || us.OutputTokens != nil:
		u.InputTokens, u.OutputTokens = n(us.InputTokens), n(us.OutputTokens)
		if d := us.InputTokensDetails; d != nil {
			u.CachedInputTokens = n(&d.CachedTokens) // (OpenAI's Responses API: part of input_tokens)
		} else {
			// Anthropic: input_tokens leaves out the cache's reads and writes.
			read, wrote := n(&us.CacheReadInputTokens), n(&us.CacheCreationInputTokens)
			u.InputTokens = min(u.InputTokens+read+wrote, policy.MaxUsageTokens)
			u.CachedInputTokens = read
		}
	default:
		return u, false
	}
	u.CachedInputTokens = min(u.CachedInputTokens, u.InputTokens)
	return u, true
}

// spendEstimate is the request's estimate and its price in micro-dollars
// (WithPrices), for the reservation's charge.
func (t *transport) spendEstimate(req *http.Request, tokens int64) (policy.Usage, int64, error) {
	var u policy.Usage
	if t.usageEst != nil {
		u = t.usageEst(req)
	} else {
		u = requestUsage(req, tokens, t.estimate != nil)
	}
	micro, err := t.prices.MicroUSD(u)
	if err != nil {
		return u, 0, fmt.Errorf("httplimit: the spend of a request: %w", err)
	}
	return u, micro, nil
}

// charges are the gate options of one reserved attempt: its tokens
// (WithTokenEstimate) and its spend (WithPrices).
func (t *transport) charges(tokens, micro int64, attempt int) []gate.Option {
	opts := []gate.Option{gate.RetryAttempt(attempt)}
	if t.estimate != nil {
		opts = append(opts, gate.Charge("tokens", tokens))
	}
	if t.prices != nil {
		opts = append(opts, gate.Charge(SpendDimension, micro))
	}
	return opts
}

// zeroSettle is the settle of an attempt that used nothing.
func (t *transport) zeroSettle() map[string]int64 {
	m := map[string]int64{}
	if t.estimate != nil {
		m["tokens"] = 0
	}
	if t.prices != nil {
		m[SpendDimension] = 0
	}
	return m
}

// usedSettle is the settle of an answer: its tokens (WithTokenUsage) and
// its spend (UsageOf, priced at est's model, the one reserved for, else
// the answer's); nil when neither is known.
func (t *transport) usedSettle(res *http.Response, est policy.Usage) map[string]int64 {
	var m map[string]int64
	if t.estimate != nil {
		if used, ok := t.usedTokens(res); ok {
			m = map[string]int64{"tokens": max(used, 0)}
		}
	}
	if t.prices != nil {
		if u, ok := UsageOf(res); ok {
			if _, priced := t.prices.Price(est.Model); priced || u.Model == "" {
				u.Model = est.Model
			}
			if micro, err := t.prices.MicroUSD(u); err == nil {
				if m == nil {
					m = map[string]int64{}
				}
				m[SpendDimension] = micro
			}
		}
	}
	return m
}
