// Prices of model calls (prices, default_price), read exactly, and what a
// call's usage costs in micro-dollars and tokens.

package policy

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Price is what a model's tokens cost, each in US dollars per million
// tokens, written as decimals ("2.50", "0.075", "10"): any number of
// decimal places, read exactly (never through a float). CachedInput, when
// empty, is Input.
type Price struct {
	Input       string
	Output      string
	CachedInput string
}

// Prices is the policy's prices section: a Price per model name, and
// Default for any other model (nil: another model is ErrUnknownModel).
type Prices struct {
	Models  map[string]Price
	Default *Price
}

// ErrUnknownModel is matched by the error of a usage whose model has no
// price and the prices no default_price.
var ErrUnknownModel = errors.New("unknown model")

// UnknownModelError names the model that has no price.
type UnknownModelError struct{ Model string }

// Error reads `unknown model "x": the policy has no price for it (and no default_price)`.
func (e *UnknownModelError) Error() string {
	return fmt.Sprintf("%v %q: the policy has no price for it (and no default_price)", ErrUnknownModel, e.Model)
}

// Unwrap returns ErrUnknownModel.
func (e *UnknownModelError) Unwrap() error { return ErrUnknownModel }

// Usage is a model call's tokens: its model, its input tokens (of which
// CachedInputTokens were read from the provider's prompt cache, as
// OpenAI's prompt_tokens_details.cached_tokens counts them) and its output
// tokens. An estimate before the call puts the call's max_output_tokens
// in OutputTokens.
type Usage struct {
	Model             string
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
}

// MaxUsageTokens bounds each count of a Usage (10^12 tokens), so that
// every price of every usage is computed without overflow.
const MaxUsageTokens = 1_000_000_000_000

// Validate reports a negative count, one above MaxUsageTokens, or cached
// input tokens beyond the input tokens.
func (u Usage) Validate() error {
	for _, c := range []struct {
		name string
		n    int64
	}{{"input_tokens", u.InputTokens}, {"output_tokens", u.OutputTokens}, {"cached_input_tokens", u.CachedInputTokens}} {
		if c.n < 0 || c.n > MaxUsageTokens {
			return fmt.Errorf("%s %d must be 0 to %d", c.name, c.n, int64(MaxUsageTokens))
		}
	}
	if u.CachedInputTokens > u.InputTokens {
		return fmt.Errorf("cached_input_tokens %d exceeds input_tokens %d (cached tokens are part of the input)", u.CachedInputTokens, u.InputTokens)
	}
	return nil
}

// Price returns the price of model: its own, else the default; false when
// neither is.
func (p *Prices) Price(model string) (Price, bool) {
	if p == nil {
		return Price{}, false
	}
	if pr, ok := p.Models[model]; ok {
		return pr, true
	}
	if p.Default != nil {
		return *p.Default, true
	}
	return Price{}, false
}

// MicroUSD is what usage u costs at these prices, in micro-dollars: a
// *UnknownModelError for a model without a price (and no default), an
// error for a usage Validate refuses or a price that is no decimal.
func (p *Prices) MicroUSD(u Usage) (int64, error) {
	pr, ok := p.Price(u.Model)
	if !ok {
		return 0, &UnknownModelError{Model: u.Model}
	}
	return pr.MicroUSD(u)
}

// MicroUSD is what usage u costs at price pr, in micro-dollars, exactly:
// uncached input tokens at Input, cached ones at CachedInput, output
// tokens at Output, the exact sum rounded up once to a whole
// micro-dollar (so that spend is never counted short; a call costing
// 0.3 micro-dollars costs 1, one costing nothing 0). Model is not read.
func (pr Price) MicroUSD(u Usage) (int64, error) {
	if err := u.Validate(); err != nil {
		return 0, err
	}
	cached := pr.CachedInput
	if cached == "" {
		cached = pr.Input
	}
	// A price of P dollars per million tokens is P micro-dollars per token.
	sum := new(big.Rat)
	for _, part := range []struct {
		price string
		n     int64
	}{{pr.Input, u.InputTokens - u.CachedInputTokens}, {cached, u.CachedInputTokens}, {pr.Output, u.OutputTokens}} {
		if part.n == 0 {
			continue
		}
		r, err := ParseDecimal(part.price)
		if err != nil {
			return 0, err
		}
		sum.Add(sum, r.Mul(r, new(big.Rat).SetInt64(part.n)))
	}
	return ceilInt64(sum)
}

// ceilInt64 is r (>= 0) rounded up to an integer, an error beyond int64.
func ceilInt64(r *big.Rat) (int64, error) {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, fmt.Errorf("a cost of %s micro-dollars is beyond the largest, %d", q, int64(math.MaxInt64))
	}
	return q.Int64(), nil
}

// ParseDecimal reads a non-negative decimal number ("2.50", "0.075",
// "10", "1_000") exactly. Fractions ("1/3"), exponents, signs other than
// none, NaN and infinities are refused.
func ParseDecimal(s string) (*big.Rat, error) {
	t := strings.ReplaceAll(s, "_", "")
	ok := t != "" && t != "." && strings.Count(t, ".") <= 1
	for _, c := range t {
		if c != '.' && (c < '0' || c > '9') {
			ok = false
		}
	}
	if !ok {
		return nil, fmt.Errorf("%q is not a decimal number of dollars (like 2.50)", s)
	}
	r, good := new(big.Rat).SetString(t)
	if !good {
		return nil, fmt.Errorf("%q is not a decimal number of dollars (like 2.50)", s)
	}
	return r, nil
}

// MicroDollars reads a decimal number of dollars ("500", "0.45") as whole
// micro-dollars, exactly: an error for more than 6 decimal places (a
// fraction of a micro-dollar) or an amount beyond int64.
func MicroDollars(s string) (int64, error) {
	r, err := ParseDecimal(s)
	if err != nil {
		return 0, err
	}
	r.Mul(r, big.NewRat(1_000_000, 1))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q dollars is not a whole number of micro-dollars (at most 6 decimal places)", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("%q dollars is beyond the largest amount", s)
	}
	return r.Num().Int64(), nil
}

// FormatMicroUSD writes micro-dollars as a decimal number of dollars with
// 6 decimal places ("0.450000", "-1.250000").
func FormatMicroUSD(n int64) string {
	sign := ""
	u := uint64(n)
	if n < 0 {
		sign, u = "-", uint64(-(n+1))+1
	}
	return fmt.Sprintf("%s%d.%06d", sign, u/1_000_000, u%1_000_000)
}
