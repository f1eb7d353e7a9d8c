package httplimit_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

var providerNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseProviderLimits(t *testing.T) {
	type pl = httplimit.ProviderLimit
	for _, tc := range []struct {
		name string
		h    http.Header
		want []pl
	}{
		{"openai", header(
			"x-ratelimit-limit-requests", "500", "x-ratelimit-remaining-requests", "499", "x-ratelimit-reset-requests", "120ms",
			"x-ratelimit-limit-tokens", "30000", "x-ratelimit-remaining-tokens", "29000", "x-ratelimit-reset-tokens", "6m0s"),
			[]pl{{Dimension: "requests", Limit: 500, Remaining: 499, Reset: 120 * time.Millisecond, Source: "openai"},
				{Dimension: "tokens", Limit: 30000, Remaining: 29000, Reset: 6 * time.Minute, Source: "openai"}}},
		{"openai fractional and compound resets", header("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1h2m3.5s",
			"x-ratelimit-remaining-requests", "12", "x-ratelimit-reset-requests", "12ms"),
			[]pl{{Dimension: "requests", Limit: -1, Remaining: 12, Reset: 12 * time.Millisecond, Source: "openai"},
				{Dimension: "tokens", Limit: -1, Remaining: 0, Reset: time.Hour + 2*time.Minute + 3500*time.Millisecond, Source: "openai"}}},
		{"anthropic", header(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49", "anthropic-ratelimit-requests-reset", "2026-12-01T10:00:01Z",
			"anthropic-ratelimit-input-tokens-limit", "40000", "anthropic-ratelimit-input-tokens-remaining", "39000", "anthropic-ratelimit-input-tokens-reset", "2026-12-01T10:00:30Z",
			"anthropic-ratelimit-output-tokens-limit", "8000", "anthropic-ratelimit-output-tokens-remaining", "0", "anthropic-ratelimit-output-tokens-reset", "2026-12-01T11:00:30+01:00",
			"anthropic-ratelimit-tokens-remaining", "47000"),
			[]pl{{Dimension: "requests", Limit: 50, Remaining: 49, Reset: time.Second, Source: "anthropic"},
				{Dimension: "tokens", Limit: -1, Remaining: 47000, Source: "anthropic"},
				{Dimension: "input_tokens", Limit: 40000, Remaining: 39000, Reset: 30 * time.Second, Source: "anthropic"},
				{Dimension: "output_tokens", Limit: 8000, Remaining: 0, Reset: 30 * time.Second, Source: "anthropic"}}},
		{"ietf", header("RateLimit-Policy", `"burst";q=100;w=60, "tokens_per_day";q=1000000;w=86400`,
			"RateLimit", `"burst";r=0;t=30`),
			[]pl{{Dimension: "requests", Name: "burst", Limit: 100, Remaining: 0, Reset: 30 * time.Second, Source: "ietf"},
				{Dimension: "tokens", Name: "tokens_per_day", Limit: 1000000, Remaining: -1, Source: "ietf"}}},
		{"ratelimit-* seconds", header("RateLimit-Limit", "100", "RateLimit-Remaining", "0", "RateLimit-Reset", "17"),
			[]pl{{Dimension: "requests", Limit: 100, Remaining: 0, Reset: 17 * time.Second, Source: "ratelimit"}}},
		{"x-ratelimit-* unix time", header("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Reset", "1796133600"),
			[]pl{{Dimension: "requests", Limit: 5000, Remaining: 4999, Reset: time.Unix(1796133600, 0).Sub(providerNow), Source: "x-ratelimit"}}},
		{"x-ratelimit-* unix time in the past", header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1700000000"),
			[]pl{{Dimension: "requests", Limit: -1, Remaining: 0, Source: "x-ratelimit"}}},
		{"retry hints", header("retry-after-ms", "1200", "Retry-After", "2"),
			[]pl{{Limit: -1, Remaining: 0, Reset: 1200 * time.Millisecond, Source: "retry-after-ms"},
				{Limit: -1, Remaining: 0, Reset: 2 * time.Second, Source: "retry-after"}}},
		{"retry-after date", header("Retry-After", "Tue, 01 Dec 2026 10:00:05 GMT"),
			[]pl{{Limit: -1, Remaining: 0, Reset: 5 * time.Second, Source: "retry-after"}}},
		{"absurd values capped", header("Retry-After", "99999999999", "x-ratelimit-remaining-tokens", "5", "x-ratelimit-reset-tokens", "999999h",
			"anthropic-ratelimit-requests-remaining", "1", "anthropic-ratelimit-requests-reset", "2090-01-01T00:00:00Z"),
			[]pl{{Dimension: "tokens", Limit: -1, Remaining: 5, Reset: httplimit.MaxProviderReset, Source: "openai"},
				{Dimension: "requests", Limit: -1, Remaining: 1, Reset: httplimit.MaxProviderReset, Source: "anthropic"},
				{Limit: -1, Remaining: 0, Reset: httplimit.MaxProviderReset, Source: "retry-after"}}},
		{"malformed values skipped", header(
			"x-ratelimit-limit-requests", "lots", "x-ratelimit-remaining-requests", "-3", "x-ratelimit-reset-requests", "-1s",
			"x-ratelimit-remaining-tokens", "7", "x-ratelimit-reset-tokens", "soon",
			"anthropic-ratelimit-tokens-reset", "tomorrow", "RateLimit", `"x";r=-1;t=abc`, "retry-after-ms", "NaN", "Retry-After", "-5",
			"X-RateLimit-Limit", "1e3", "RateLimit-Remaining", "99999999999999999999"),
			[]pl{{Dimension: "tokens", Limit: -1, Remaining: 7, Source: "openai"}}},
		{"nothing", header("Content-Type", "application/json"), nil},
	} {
		got := httplimit.ParseProviderLimitsAt(tc.h, providerNow)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func FuzzParseProviderLimits(f *testing.F) {
	for _, s := range [][2]string{
		{"x-ratelimit-reset-tokens", "6m0s"}, {"anthropic-ratelimit-tokens-reset", "2026-12-01T10:00:30Z"},
		{"RateLimit", `"a";r=1;t=2`}, {"RateLimit-Policy", `"a";q=10;w=60`}, {"X-RateLimit-Reset", "1796133600"},
		{"retry-after-ms", "1.5"}, {"Retry-After", "Tue, 01 Dec 2026 10:00:05 GMT"}, {"x-ratelimit-remaining-requests", "12"},
	} {
		f.Add(s[0], s[1], s[0], s[1])
	}
	dims := map[string]bool{"": true, "requests": true, "tokens": true, "input_tokens": true, "output_tokens": true}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		for _, l := range httplimit.ParseProviderLimitsAt(h, providerNow) {
			if l.Reset < 0 || l.Reset > httplimit.MaxProviderReset || l.Limit < -1 || l.Remaining < -1 || !dims[l.Dimension] || l.Source == "" {
				t.Fatalf("%q=%q %q=%q: %+v", k1, v1, k2, v2, l)
			}
			if l.Dimension == "" && l.Remaining != 0 {
				t.Fatalf("a retry hint with remaining %d", l.Remaining)
			}
		}
	})
}
