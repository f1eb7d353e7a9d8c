// Providers' rate-limit headers: what an API says about its own limits on
// every answer.

package httplimit

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// ProviderLimit is one limit an API reports about itself in a response's
// headers: in Dimension, Limit units per period of which Remaining are
// left, full again (or, for a retry hint, open again) after Reset.
type ProviderLimit struct {
	// Dimension is what is counted: "requests", "tokens",
	// "input_tokens" or "output_tokens"; "" for a retry hint (Retry-After,
	// retry-after-ms), which holds for every dimension.
	Dimension string
	// Name is the policy's name where the header names one (the IETF
	// RateLimit fields), else "".
	Name string
	// Limit is the limit per period; -1 when not given.
	Limit int64
	// Remaining is what is left now; -1 when not given (a retry hint has
	// 0).
	Remaining int64
	// Reset is the time until the limit is full again (the time until a
	// retry hint ends); 0 when not given. Never negative, at most
	// MaxProviderReset.
	Reset time.Duration
	// Source names the header family: "openai", "anthropic", "ietf"
	// (RateLimit, RateLimit-Policy), "ratelimit" (RateLimit-Limit,
	// -Remaining, -Reset), "x-ratelimit" (X-RateLimit-*), "retry-after-ms"
	// or "retry-after".
	Source string
}

// MaxProviderReset caps the resets (and retry hints) ParseProviderLimits
// reports: a longer one (a date years ahead, a garbled number) counts as
// this long.
const MaxProviderReset = 24 * time.Hour

// maxProviderCount caps limits and remainders: larger figures are absurd.
const maxProviderCount = 1 << 53

// ParseProviderLimits reads the rate-limit headers of any response (a 200
// as well as a 429), in these families:
//
//   - OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the
//     resets Go-style durations ("1s", "6m0s", "12ms", "1h2m3.5s");
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-{limit,remaining,reset}, the resets RFC 3339 times;
//   - IETF: RateLimit ("name";r=remaining;t=seconds) with RateLimit-Policy
//     ("name";q=limit;w=window), items matched by name;
//   - RateLimit-{Limit,Remaining,Reset} and X-RateLimit-{Limit,Remaining,
//     Reset}: a reset of 1e9 or more is a Unix time (seconds; one in the
//     past counts as 0), a smaller one seconds;
//   - retry-after-ms (milliseconds) and Retry-After (seconds or an
//     HTTP-date), as a limit of Dimension "" with Remaining 0.
//
// Header names are matched case-insensitively. A malformed value is
// skipped (the others of its limit are kept); a reset is never negative
// and at most MaxProviderReset; counts above 2^53 are skipped. The limits
// come in the order of the list above, dimensions in the order requests,
// tokens, input_tokens, output_tokens. It never panics.
func ParseProviderLimits(h http.Header) []ProviderLimit {
	return ParseProviderLimitsAt(h, time.Now())
}

// ParseProviderLimitsAt is ParseProviderLimits with resets given as times
// measured from now.
func ParseProviderLimitsAt(h http.Header, now time.Time) []ProviderLimit {
	var out []ProviderLimit
	for _, d := range [...]struct{ dim, suffix string }{{"requests", "requests"}, {"tokens", "tokens"}} {
		l := ProviderLimit{Dimension: d.dim, Source: "openai", Limit: count(h.Get("X-Ratelimit-Limit-" + d.suffix)),
			Remaining: count(h.Get("X-Ratelimit-Remaining-" + d.suffix))}
		l.Reset = goDuration(h.Get("X-Ratelimit-Reset-" + d.suffix))
		out = appendLimit(out, l, h.Get("X-Ratelimit-Reset-"+d.suffix) != "")
	}
	for _, d := range [...]struct{ dim, part string }{{"requests", "requests"}, {"tokens", "tokens"},
		{"input_tokens", "input-tokens"}, {"output_tokens", "output-tokens"}} {
		p := "Anthropic-Ratelimit-" + d.part + "-"
		l := ProviderLimit{Dimension: d.dim, Source: "anthropic", Limit: count(h.Get(p + "Limit")), Remaining: count(h.Get(p + "Remaining"))}
		reset := h.Get(p + "Reset")
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(reset)); err == nil {
			l.Reset = capReset(t.Sub(now))
		}
		out = appendLimit(out, l, reset != "")
	}
	out = append(out, ietfLimits(h)...)
	for _, f := range [...]struct{ prefix, source string }{{"Ratelimit-", "ratelimit"}, {"X-Ratelimit-", "x-ratelimit"}} {
		l := ProviderLimit{Dimension: "requests", Source: f.source, Limit: count(h.Get(f.prefix + "Limit")), Remaining: count(h.Get(f.prefix + "Remaining"))}
		if n, ok := nonNegInt(h.Get(f.prefix + "Reset")); ok {
			if n >= 1e9 {
				l.Reset = capReset(time.Unix(int64(n), 0).Sub(now))
			} else {
				l.Reset = capReset(secs(n))
			}
		}
		out = appendLimit(out, l, h.Get(f.prefix+"Reset") != "")
	}
	if d, ok := retryAfterMS(h.Get("Retry-After-Ms")); ok {
		out = append(out, ProviderLimit{Source: "retry-after-ms", Limit: -1, Remaining: 0, Reset: d})
	}
	if d, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
		out = append(out, ProviderLimit{Source: "retry-after", Limit: -1, Remaining: 0, Reset: capReset(d)})
	}
	return out
}

// appendLimit appends l when any of its figures was given.
func appendLimit(out []ProviderLimit, l ProviderLimit, resetGiven bool) []ProviderLimit {
	if l.Limit < 0 && l.Remaining < 0 && (!resetGiven || l.Reset == 0) {
		return out
	}
	return append(out, l)
}

// ietfLimits reads RateLimit with RateLimit-Policy (matched by name).
func ietfLimits(h http.Header) []ProviderLimit {
	policies := map[string]int64{}
	for _, v := range h.Values("RateLimit-Policy") {
		items, ok := ParseRateLimitField(v)
		if !ok {
			continue
		}
		for _, it := range items {
			if q := count(it.Params["q"]); q >= 0 {
				policies[it.Policy] = q
			}
		}
	}
	var out []ProviderLimit
	var seen []string
	for _, v := range h.Values("RateLimit") {
		items, ok := ParseRateLimitField(v)
		if !ok {
			continue
		}
		for _, it := range items {
			l := ProviderLimit{Dimension: ietfDimension(it.Policy), Name: it.Policy, Source: "ietf", Limit: -1, Remaining: count(it.Params["r"])}
			if q, ok := policies[it.Policy]; ok {
				l.Limit = q
			}
			if t, ok := nonNegInt(it.Params["t"]); ok {
				l.Reset = capReset(secs(t))
			}
			if l.Remaining >= 0 || l.Reset > 0 {
				out, seen = append(out, l), append(seen, it.Policy)
			}
		}
	}
	// policies announced without a RateLimit item: their limit alone
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !slices.Contains(seen, n) {
			out = append(out, ProviderLimit{Dimension: ietfDimension(n), Name: n, Source: "ietf", Limit: policies[n], Remaining: -1})
		}
	}
	return out
}

// ietfDimension is the dimension an IETF policy name suggests: tokens
// when it speaks of tokens (input or output ones apart), else requests.
func ietfDimension(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "input") && strings.Contains(n, "token"):
		return "input_tokens"
	case strings.Contains(n, "output") && strings.Contains(n, "token"):
		return "output_tokens"
	case strings.Contains(n, "token"):
		return "tokens"
	}
	return "requests"
}

// count parses a non-negative count; -1 when absent, malformed or absurd.
func count(v string) int64 {
	n, ok := nonNegInt(v)
	if !ok || n > maxProviderCount {
		return -1
	}
	return int64(n)
}

// goDuration parses a Go-style duration ("6m0s"); 0 when malformed,
// negative or beyond a Go duration's range, capped at MaxProviderReset.
func goDuration(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" || v[0] == '-' || v[0] == '+' {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0 // (malformed, or beyond a Go duration's range)
	}
	return capReset(d)
}

func capReset(d time.Duration) time.Duration { return min(max(d, 0), MaxProviderReset) }
