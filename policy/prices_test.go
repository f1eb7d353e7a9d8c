package policy

import (
	"errors"
	"strings"
	"testing"
)

const pricedPolicy = `
prices:
  gpt-4o: {input: 2.50, output: 10.00, cached_input: 1.25}
  tiny: {input: 0.0000003, output: 0.1234567891}
default_price: {input: 1, output: 2}
limits:
  - name: budget
    key: "team:{team}"
    algorithm: quota
    period: month
    timezone: Europe/Berlin
    limit: 0.45
    unit: usd
  - name: per_second_spend
    key: "team:{team}"
    capacity: 1.5
    refill_per_second: 0.25
    unit: usd
  - name: tpm
    key: "team:{team}"
    capacity: 30000
    refill: 30000/m
    unit: tokens
  - name: rpm
    key: "team:{team}"
    capacity: 10
    refill: 10/m
`

func TestPricesExact(t *testing.T) {
	p, err := Parse([]byte(pricedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Limit("budget").Capacity(); got != 450_000 {
		t.Fatalf("budget capacity %d micro-dollars, want 450000", got)
	}
	if l := p.Limit("per_second_spend"); l.Capacity() != 1_500_000 || l.Bucket.Rate != 250_000 {
		t.Fatalf("bucket in micro-dollars: %d, %v", l.Capacity(), l.Bucket.Rate)
	}
	for _, c := range []struct {
		u    Usage
		want int64
	}{
		// 1200 input at 2.50/M = 3000 µ$, 800 output at 10/M = 8000 µ$.
		{Usage{Model: "gpt-4o", InputTokens: 1200, OutputTokens: 800}, 11_000},
		// 1000 of 1200 input cached: 200*2.5 + 1000*1.25 = 500 + 1250.
		{Usage{Model: "gpt-4o", InputTokens: 1200, CachedInputTokens: 1000}, 1_750},
		// 3 input at 0.0000003 = 0.0000009 µ$, rounded up to 1.
		{Usage{Model: "tiny", InputTokens: 3}, 1},
		// 10^9 output at 0.1234567891 = 123456789.1 µ$ -> 123456790.
		{Usage{Model: "tiny", OutputTokens: 1_000_000_000}, 123_456_790},
		// a model without a price of its own: default_price.
		{Usage{Model: "other", InputTokens: 1, OutputTokens: 1}, 3},
		{Usage{Model: "gpt-4o"}, 0},
	} {
		got, err := p.UsageCost(p.Limit("budget"), c.u)
		if err != nil || got != c.want {
			t.Errorf("%+v: %d, %v; want %d", c.u, got, err, c.want)
		}
	}
	if n, _ := p.UsageCost(p.Limit("tpm"), Usage{Model: "x", InputTokens: 5, OutputTokens: 7}); n != 12 {
		t.Errorf("tokens %d, want 12", n)
	}
	if n, _ := p.UsageCost(p.Limit("rpm"), Usage{Model: "x", InputTokens: 5}); n != 0 {
		t.Errorf("a requests limit counts %d of a usage, want 0", n)
	}
}

func TestPricesUnknownModel(t *testing.T) {
	p, err := Parse([]byte(strings.Replace(pricedPolicy, "default_price: {input: 1, output: 2}\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.UsageCost(p.Limit("budget"), Usage{Model: "gpt-5", InputTokens: 1})
	var um *UnknownModelError
	if !errors.As(err, &um) || um.Model != "gpt-5" || !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("%v", err)
	}
}

func TestPricesInvalid(t *testing.T) {
	for src, want := range map[string]string{
		"prices: {m: {input: 1/3, output: 1}}\nlimits: [{name: a, key: k, capacity: 1, refill_per_second: 1}]\n":                    "not a decimal",
		"prices: {m: {input: -1, output: 1}}\nlimits: [{name: a, key: k, capacity: 1, refill_per_second: 1}]\n":                     "not a decimal",
		"prices: {m: {input: 1}}\nlimits: [{name: a, key: k, capacity: 1, refill_per_second: 1}]\n":                                 "missing output",
		"prices: {m: {input: 1, output: 1, cache: 1}}\nlimits: [{name: a, key: k, capacity: 1, refill_per_second: 1}]\n":            "unknown field in a price",
		"limits: [{name: a, key: k, capacity: 1, refill_per_second: 1, unit: usd}]\n":                                               "needs the policy's prices",
		"limits: [{name: a, key: k, capacity: 1, refill_per_second: 1, unit: dollars}]\n":                                           "unknown unit",
		"default_price: {input: 1, output: 1}\nlimits: [{name: a, key: k, capacity: 0.0000001, refill_per_second: 1, unit: usd}]\n": "at most 6 decimal places",
		"default_price: {input: 1, output: 1}\nlimits: [{name: a, key: k, max_in_flight: 1, lease_ttl: 1s, unit: usd}]\n":           "not dollars",
	} {
		_, err := Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

func TestUsageValidate(t *testing.T) {
	for _, u := range []Usage{{InputTokens: -1}, {InputTokens: 1, CachedInputTokens: 2}, {OutputTokens: MaxUsageTokens + 1}} {
		if u.Validate() == nil {
			t.Errorf("%+v accepted", u)
		}
	}
	if s := FormatMicroUSD(450_000); s != "0.450000" {
		t.Error(s)
	}
	if s := FormatMicroUSD(-1_250_000); s != "-1.250000" {
		t.Error(s)
	}
}
