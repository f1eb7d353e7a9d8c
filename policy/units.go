// What a limit counts (unit: requests, tokens, input_tokens,
// output_tokens, usd), and the validation of unit, prices and
// default_price.

package policy

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/suggest"
)

// The values of unit (Limit.Unit).
const (
	// UnitRequests (the default, unit omitted) counts each request's cost.
	UnitRequests = "requests"
	// UnitTokens counts a call's input and output tokens.
	UnitTokens = "tokens"
	// UnitInputTokens counts its input tokens.
	UnitInputTokens = "input_tokens"
	// UnitOutputTokens counts its output tokens.
	UnitOutputTokens = "output_tokens"
	// UnitUSD counts what it costs at the policy's prices, in
	// micro-dollars: the limit's capacity (capacity, limit) and refill are
	// written in dollars and kept in whole micro-dollars.
	UnitUSD = "usd"
)

// units are the values unit takes.
var units = []string{UnitRequests, UnitTokens, UnitInputTokens, UnitOutputTokens, UnitUSD}

// CountsUsage reports whether l counts a call's usage (tokens or money)
// rather than the request's cost: its cost is then what a usage estimate
// or a usage says (Policy.UsageCost), 0 for a request with neither.
func (l *Limit) CountsUsage() bool { return l.Unit != "" && l.Unit != UnitRequests }

// UsageCost is what usage u counts on limit l: its input and output
// tokens (unit tokens), one of them (input_tokens, output_tokens), or its
// price in micro-dollars (usd: a *UnknownModelError for a model without a
// price). A limit that does not count usage counts 0. An estimate before
// the call gives its max_output_tokens as u.OutputTokens.
func (p *Policy) UsageCost(l *Limit, u Usage) (int64, error) {
	if err := u.Validate(); err != nil {
		return 0, err
	}
	switch l.Unit {
	case UnitTokens:
		return u.InputTokens + u.OutputTokens, nil
	case UnitInputTokens:
		return u.InputTokens, nil
	case UnitOutputTokens:
		return u.OutputTokens, nil
	case UnitUSD:
		return p.Prices.MicroUSD(u)
	}
	return 0, nil
}

// UsesPrices reports whether some limit of p counts money (unit: usd).
func (p *Policy) UsesPrices() bool {
	return slices.ContainsFunc(p.Limits, func(l *Limit) bool { return l.Unit == UnitUSD })
}

// unit validates a limit's unit; for usd, it rewrites the limit's
// capacity and refill, written in dollars, into whole micro-dollars
// before its kind reads them.
func (f *limitFields) unit(l *Limit) {
	s, ok := f.str("unit")
	if !ok {
		return
	}
	if !slices.Contains(units, s) {
		f.bad("unit", "unknown unit %q (want %s)%s", s, orList(units), suggest.DidYouMean(s, units))
		return
	}
	l.Unit = s
	if s == UnitRequests {
		l.Unit = ""
	}
	if s != UnitUSD {
		return
	}
	if f.has("max_in_flight") {
		f.bad("unit", "a max_in_flight limit counts requests held at once, not dollars")
		return
	}
	for _, field := range []string{"capacity", "limit"} {
		if n := f.fields[field]; n != nil && n.Kind == yaml.ScalarNode {
			micro, err := MicroDollars(n.Value)
			if err != nil {
				f.bad(field, "with unit usd, %s is in dollars: %v", field, err)
				continue
			}
			n.Value, n.Tag = strconv.FormatInt(micro, 10), "!!int"
		}
	}
	if n := f.fields["refill_per_second"]; n != nil && n.Kind == yaml.ScalarNode {
		if r, err := ParseDecimal(n.Value); err == nil {
			n.Value = r.Mul(r, big.NewRat(1_000_000, 1)).FloatString(6)
		}
	}
	if n := f.fields["refill"]; n != nil && n.Kind == yaml.ScalarNode {
		if num, per, ok := strings.Cut(n.Value, "/"); ok {
			if r, err := ParseDecimal(strings.TrimSpace(num)); err == nil {
				n.Value = r.Mul(r, big.NewRat(1_000_000, 1)).FloatString(6) + "/" + per
			}
		}
	}
}

// priceFields are the fields of a price.
var priceFields = []string{"input", "output", "cached_input"}

// prices validates the prices section: a mapping of model name to price.
func (v *validator) prices(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.MappingNode {
		v.at(n, "", "prices", "must be a mapping of model name to {input, output, cached_input} (dollars per million tokens)")
		return
	}
	if p.Prices == nil {
		p.Prices = &Prices{}
	}
	p.Prices.Models = map[string]Price{}
	for _, e := range v.pairs(n, "") {
		if e.key.Value == "" {
			v.at(e.key, "", "prices", "a model name must not be empty")
			continue
		}
		if pr, ok := v.price(e.val, "prices."+e.key.Value); ok {
			p.Prices.Models[e.key.Value] = pr
		}
	}
}

// defaultPrice validates default_price.
func (v *validator) defaultPrice(n *yaml.Node, p *Policy) {
	if pr, ok := v.price(n, "default_price"); ok {
		if p.Prices == nil {
			p.Prices = &Prices{}
		}
		p.Prices.Default = &pr
	}
}

// price validates one price: input and output required, cached_input
// optional, each a non-negative decimal number of dollars per million
// tokens.
func (v *validator) price(n *yaml.Node, field string) (Price, bool) {
	var pr Price
	if n.Kind != yaml.MappingNode {
		v.at(n, "", field, "a price must be a mapping with input, output and optionally cached_input (dollars per million tokens)")
		return pr, false
	}
	errs := len(v.errs)
	for _, e := range v.pairs(n, "") {
		var dst *string
		switch e.key.Value {
		case "input":
			dst = &pr.Input
		case "output":
			dst = &pr.Output
		case "cached_input":
			dst = &pr.CachedInput
		default:
			v.at(e.key, "", field+"."+e.key.Value, "unknown field in a price"+suggestOrList(e.key.Value, priceFields))
			continue
		}
		if e.val.Kind != yaml.ScalarNode {
			v.at(e.val, "", field+"."+e.key.Value, "must be a number of dollars per million tokens")
			continue
		}
		if _, err := ParseDecimal(e.val.Value); err != nil {
			v.at(e.val, "", field+"."+e.key.Value, err.Error())
			continue
		}
		*dst = e.val.Value
	}
	for _, req := range []struct {
		name string
		val  string
	}{{"input", pr.Input}, {"output", pr.Output}} {
		if req.val == "" && len(v.errs) == errs {
			v.at(n, "", field, fmt.Sprintf("missing %s (dollars per million tokens)", req.name))
		}
	}
	return pr, len(v.errs) == errs
}

// checkPrices reports a usd limit in a policy without prices.
func (v *validator) checkPrices(p *Policy) {
	if p.Prices != nil {
		return
	}
	for _, l := range p.Limits {
		if l.Unit == UnitUSD {
			v.add(&Error{Line: l.Line, Limit: l.Name, Field: "unit", Msg: "a limit with unit usd needs the policy's prices (or default_price)"})
		}
	}
}
