// Spend and tokens from a model call's usage: the per-limit costs of an
// estimate before the call (UsageCosts) and the actual costs of its usage
// after it (UsageActuals), for the limits that count usage (policy unit).

package limiter

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/policy"
)

// UsageError is an error of what a usage counts on a limit (a
// *policy.UnknownModelError, or a usage out of bounds), naming the limit.
type UsageError struct {
	Limit string
	Err   error
}

// Error reads `limit "budget": unknown model "x": ...`.
func (e *UsageError) Error() string { return fmt.Sprintf("limit %q: %v", e.Limit, e.Err) }

// Unwrap returns the error.
func (e *UsageError) Unwrap() error { return e.Err }

// UsageCosts returns costs (Request.Costs) completed with a cost for every
// limit of the policy in force that counts usage (unit tokens,
// input_tokens, output_tokens or usd: policy.Limit.CountsUsage) and applies
// to desc, and that costs does not name already (a caller's own cost for a
// limit wins): what the estimate est counts on it (policy.UsageCost: a usd
// limit its price in micro-dollars, the input tokens at the input price and
// OutputTokens, the call's max_output_tokens, at the output price), or 0
// without an estimate (a request that says nothing of its usage reserves
// nothing, and is refused while the limit is spent beyond its budget).
// Checked with these costs, the request reserves its spend on every usd
// limit all or nothing with its other limits. The errors are
// *UsageErrors of policy.UsageCost's (a *policy.UnknownModelError for a model without a
// price, when a usd limit applies). costs is not modified; when no limit
// counting usage applies, it is returned as it is.
func (l *Limiter) UsageCosts(desc map[string]string, est *policy.Usage, costs map[string]int64) (map[string]int64, error) {
	p := l.compiled.Load().p
	out, copied := costs, false
	for _, lim := range p.Limits {
		if !lim.CountsUsage() {
			continue
		}
		if _, named := costs[lim.Name]; named {
			continue
		}
		if _, ok := lim.AppendKey(nil, desc); !ok {
			continue
		}
		var n int64
		if est != nil {
			var err error
			if n, err = p.UsageCost(lim, *est); err != nil {
				return nil, &UsageError{Limit: lim.Name, Err: err}
			}
		}
		if !copied {
			out, copied = make(map[string]int64, len(costs)+2), true
			for k, v := range costs {
				out[k] = v
			}
		}
		out[lim.Name] = n
	}
	return out, nil
}

// UsageActuals returns actuals (SettleCosts' per-limit actual costs)
// completed, for every limit of receipt r that counts usage and that
// actuals does not name, with what the call's usage u counts on it
// (policy.UsageCost): settled with it, a usd limit's reserved spend
// becomes the exact price of the usage (the difference refunded, or
// charged into debt), a token limit's the tokens used. actuals is not
// modified. The errors are *UsageErrors of policy.UsageCost's.
func (l *Limiter) UsageActuals(r Receipt, u policy.Usage, actuals map[string]int64) (map[string]int64, error) {
	p := l.compiled.Load().p
	out := make(map[string]int64, len(actuals)+len(r.limits))
	for k, v := range actuals {
		out[k] = v
	}
	for _, name := range r.limits {
		lim := p.Limit(name)
		if lim == nil || !lim.CountsUsage() {
			continue
		}
		if _, named := actuals[name]; named {
			continue
		}
		n, err := p.UsageCost(lim, u)
		if err != nil {
			return nil, &UsageError{Limit: name, Err: err}
		}
		out[name] = n
	}
	return out, nil
}

// Limits returns the names of the limits r took from, in policy order (a
// limit may be named twice when a request took from it twice).
func (r Receipt) Limits() []string { return slices.Clone(r.limits) }

// Cost returns what r took from limit name (the sum, when it took from it
// more than once); false when it took nothing from it.
func (r Receipt) Cost(name string) (int64, bool) {
	var n int64
	found := false
	for i, l := range r.limits {
		if l == name {
			n, found = n+r.taken[i].Delta, true
		}
	}
	return n, found
}
