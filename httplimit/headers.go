// Parsing what a server says of its limits: Retry-After, the RateLimit field, the retry hint of an answer.

package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxRetryAfter caps the retry hints a server can impose through the
// transport unless WithMaxRetryAfter sets another cap: a longer hint (an
// absurd Retry-After such as a date years ahead) counts as this long.
const DefaultMaxRetryAfter = 10 * time.Minute

// ParseRetryAfter parses a Retry-After field value (RFC 9110 section
// 10.2.3): delta-seconds, or an HTTP-date measured from now. It returns
// false for anything malformed or negative; a date in the past gives 0.
// It never panics.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && allDigits(v) {
				return maxDuration, true // absurdly large: the caller caps it
			}
			return 0, false
		}
		if n > uint64(maxDuration/time.Second) {
			return maxDuration, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

const maxDuration = time.Duration(1<<63 - 1)

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// RateLimitItem is one member of a RateLimit or RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers, structured-field syntax): the
// policy name and its parameters.
type RateLimitItem struct {
	Policy string
	Params map[string]string
}

// ParseRateLimitField parses a structured-field list such as
// `"default";r=0;t=30, "daily";r=40;t=3600` or `"burst";q=100;w=60`. It is
// tolerant (unknown parameters are kept, bare tokens accepted) and returns
// false when the value is not a list of items. It never panics.
func ParseRateLimitField(v string) ([]RateLimitItem, bool) {
	var items []RateLimitItem
	for _, member := range splitOutsideQuotes(v, ',') {
		member = strings.TrimSpace(member)
		if member == "" {
			return nil, false
		}
		parts := splitOutsideQuotes(member, ';')
		name, ok := bareItem(strings.TrimSpace(parts[0]))
		if !ok {
			return nil, false
		}
		it := RateLimitItem{Policy: name, Params: map[string]string{}}
		for _, p := range parts[1:] {
			k, val, found := strings.Cut(strings.TrimSpace(p), "=")
			if k == "" || strings.ContainsAny(k, " \t\"") {
				return nil, false
			}
			if !found {
				val = "?1" // a bare key is boolean true
			}
			if u, ok := bareItem(val); ok {
				val = u
			}
			it.Params[k] = val
		}
		items = append(items, it)
	}
	return items, len(items) > 0
}

// bareItem returns a token, or the content of a quoted string.
func bareItem(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	if s[0] == '"' {
		if len(s) < 2 || s[len(s)-1] != '"' {
			return "", false
		}
		return strings.ReplaceAll(strings.ReplaceAll(s[1:len(s)-1], `\"`, `"`), `\\`, `\`), true
	}
	if strings.ContainsAny(s, " \t\"") {
		return "", false
	}
	return s, true
}

func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	inQuote, esc, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case inQuote && c == '\\':
			esc = true
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// RetryHint returns how long h asks the client to wait: the longest of
// Retry-After (delta-seconds or HTTP-date), retry-after-ms (OpenAI's, in
// milliseconds), the reset time `t` of the most constraining exhausted
// policy (`r=0`) in the RateLimit field, and the older
// RateLimit-Remaining: 0 with RateLimit-Reset (delta seconds), among those
// present and valid. Malformed values are ignored; the result is never
// negative and never above maxHint.
func RetryHint(h http.Header, now time.Time, maxHint time.Duration) (time.Duration, bool) {
	d, ok := hint(h, now)
	if !ok {
		return 0, false
	}
	return min(max(d, 0), maxHint), true
}

func hint(h http.Header, now time.Time) (time.Duration, bool) {
	var best time.Duration
	found := false
	take := func(d time.Duration) { best, found = max(best, d), true }
	if v := h.Get("Retry-After"); v != "" {
		if d, ok := ParseRetryAfter(v, now); ok {
			take(d)
		}
	}
	if d, ok := retryAfterMS(h.Get("Retry-After-Ms")); ok {
		take(d)
	}
	for _, v := range h.Values("RateLimit") {
		items, ok := ParseRateLimitField(v)
		if !ok {
			continue
		}
		for _, it := range items {
			r, rok := nonNegInt(it.Params["r"])
			t, tok := nonNegInt(it.Params["t"])
			if rok && tok && r == 0 {
				take(secs(t))
			}
		}
	}
	if r, ok := nonNegInt(h.Get("RateLimit-Remaining")); ok && r == 0 {
		if t, ok := nonNegInt(h.Get("RateLimit-Reset")); ok {
			take(secs(t))
		}
	}
	return best, found
}

// retryAfterMS parses retry-after-ms (non-negative milliseconds, a
// fraction allowed), capped at MaxProviderReset.
func retryAfterMS(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || ms < 0 || ms != ms {
		return 0, false
	}
	if ms >= float64(MaxProviderReset/time.Millisecond) {
		return MaxProviderReset, true
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

func nonNegInt(s string) (uint64, bool) {
	s = strings.TrimSpace(s)
	if !allDigits(s) || len(s) > 15 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

func secs(n uint64) time.Duration {
	if n > uint64(maxDuration/time.Second) {
		return maxDuration
	}
	return time.Duration(n) * time.Second
}
