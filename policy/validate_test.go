package policy_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// where is the position and subject of one reported problem.
type where struct {
	line, col   int
	limit, fild string
}

func problems(t *testing.T, src string) []where {
	t.Helper()
	_, err := policy.Parse([]byte(src))
	var es policy.Errors
	if !errors.As(err, &es) {
		t.Fatalf("%q: got %v, want policy.Errors", src, err)
	}
	var ws []where
	for _, e := range es {
		ws = append(ws, where{e.Line, e.Column, e.Limit, e.Field})
	}
	return ws
}

// Independent problems are independent errors: fixing one never reveals
// another that was there all along.
func TestEveryProblemReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      []where
	}{
		{"bucket capacity and rate",
			"limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: -1\n",
			[]where{{4, 15, "a", "capacity"}, {5, 24, "a", "refill_per_second"}}},
		{"bucket capacity and refill",
			"limits:\n  - name: a\n    key: x\n    capacity: many\n    refill: 0/s\n",
			[]where{{4, 15, "a", "capacity"}, {5, 13, "a", "refill"}}},
		{"bucket rate NaN",
			"limits:\n  - name: a\n    key: x\n    capacity: -3\n    refill_per_second: NaN\n",
			[]where{{4, 15, "a", "capacity"}, {5, 24, "a", "refill_per_second"}}},
		{"bucket missing both",
			"limits:\n  - name: a\n    key: x\n",
			[]where{{2, 5, "a", "capacity"}, {2, 5, "a", "refill_per_second"}}},
		{"bucket both rates and bad capacity",
			"limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: 1\n    refill: 1/x\n",
			[]where{{4, 15, "a", "capacity"}, {6, 13, "a", "refill"}, {6, 13, "a", "refill"}}},
		{"sliding window",
			"limits:\n  - name: w\n    key: x\n    algorithm: sliding_window\n    limit: 0\n    window: 0s\n",
			[]where{{5, 12, "w", "limit"}, {6, 13, "w", "window"}}},
		{"fixed window",
			"limits:\n  - name: w\n    key: x\n    algorithm: fixed_window\n    limit: ten\n    window: forever\n",
			[]where{{5, 12, "w", "limit"}, {6, 13, "w", "window"}}},
		{"window missing both",
			"limits:\n  - name: w\n    key: x\n    algorithm: fixed_window\n",
			[]where{{2, 5, "w", "limit"}, {2, 5, "w", "window"}}},
		{"concurrency",
			"limits:\n  - name: c\n    key: x\n    max_in_flight: 0\n    lease_ttl: -1s\n",
			[]where{{4, 20, "c", "max_in_flight"}, {5, 16, "c", "lease_ttl"}}},
		{"quota period and zone",
			"limits:\n  - name: q\n    key: x\n    algorithm: quota\n    limit: 0\n    period: fortnight\n    timezone: Mars/Olympus\n",
			[]where{{5, 12, "q", "limit"}, {6, 13, "q", "period"}, {7, 15, "q", "timezone"}}},
		{"quota missing limit and period",
			"limits:\n  - name: q\n    key: x\n    algorithm: quota\n    timezone: Local\n",
			[]where{{2, 5, "q", "limit"}, {2, 5, "q", "period"}, {5, 15, "q", "timezone"}}},
		{"common fields and kind fields",
			"limits:\n  - name: \"a b\"\n    key: \"t:{\"\n    on_store_error: shrug\n    capacity: 0\n    refill_per_second: 1\n",
			[]where{{2, 11, "a b", "name"}, {3, 10, "a b", "key"}, {4, 21, "a b", "on_store_error"}, {5, 15, "a b", "capacity"}}},
		{"when descriptor and capacity",
			"limits:\n  - name: a\n    key: x\n    when: {\"r t\": /e}\n    capacity: 0\n    refill_per_second: 1\n",
			[]where{{4, 12, "a", "when"}, {5, 15, "a", "capacity"}}},
		{"hash_tag and capacity",
			"limits:\n  - name: a\n    key: \"t:{t}\"\n    hash_tag: \"{u}\"\n    capacity: 0\n    refill_per_second: 1\n",
			[]where{{4, 15, "a", "hash_tag"}, {5, 15, "a", "capacity"}}},
		{"duplicate name of an invalid limit",
			"limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: 1\n  - name: a\n    key: y\n    capacity: 1\n    refill_per_second: 1\n",
			[]where{{4, 15, "a", "capacity"}, {6, 11, "a", "name"}}},
		{"field given twice and another problem",
			"limits:\n  - name: a\n    key: x\n    key: y\n    capacity: 1\n    refill_per_second: 0\n",
			[]where{{4, 5, "a", "key"}, {6, 24, "a", "refill_per_second"}}},
		{"cost rule",
			"limits:\n  - name: a\n    key: x\n    capacity: 1\n    refill_per_second: 1\ncosts:\n  - cost: 0\n",
			[]where{{7, 5, "", "when"}, {7, 11, "", "cost"}}},
		{"unknown field and kind problem",
			"limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: 1\n    color: red\n",
			[]where{{4, 15, "a", "capacity"}, {6, 5, "a", "color"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := problems(t, tc.src); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%q:\n got %v\nwant %v", tc.src, got, tc.want)
			}
		})
	}
}

// Errors lists one problem a line and still matches ErrInvalid; each
// problem keeps its own format.
func TestErrorsOnePerLine(t *testing.T) {
	t.Parallel()
	_, err := policy.Parse([]byte("limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: -1\n"))
	want := `policy: 2 problems:
  line 4, column 15: limit "a": field "capacity": capacity 0 must be at least 1
  line 5, column 24: limit "a": field "refill_per_second": rate -1 must be positive`
	if err == nil || err.Error() != want || !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	wrapped := fmt.Errorf("load: %w", err)
	if !errors.Is(wrapped, policy.ErrInvalid) {
		t.Fatal("wrapped Errors does not match ErrInvalid")
	}
	_, err = policy.Parse([]byte("limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: 1\n"))
	if want := `policy: line 4, column 15: limit "a": field "capacity": capacity 0 must be at least 1`; err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestParseKind(t *testing.T) {
	t.Parallel()
	for _, k := range []policy.Kind{policy.TokenBucket, policy.SlidingWindow, policy.FixedWindow, policy.Concurrency} {
		if got, err := policy.ParseKind(k.String()); err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", k.String(), got, err, k)
		}
	}
	for _, s := range []string{"", "unknown", "Token_Bucket", "token_bucket ", "leaky"} {
		if k, err := policy.ParseKind(s); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
			t.Errorf("ParseKind(%q) = %v, %v; want an error naming it", s, k, err)
		}
	}
}

// kindFields is, for each kind, a limit giving every field it takes.
var kindFields = map[policy.Kind]string{
	policy.TokenBucket:   "    algorithm: token_bucket\n    capacity: 10\n    refill_per_second: 2\n",
	policy.SlidingWindow: "    algorithm: sliding_window\n    limit: 10\n    window: 1m\n",
	policy.FixedWindow:   "    algorithm: fixed_window\n    limit: 10\n    window: 1m\n",
	policy.Concurrency:   "    algorithm: concurrency\n    max_in_flight: 3\n    lease_ttl: 30s\n",
}

const commonFields = "  - name: a\n    key: \"t:{t}:u:{u}\"\n    when: {r: /x}\n    hash_tag: \"{t}\"\n    on_store_error: local\n"

// Every field of every kind is accepted, with the common ones.
func TestKnownFieldsAccepted(t *testing.T) {
	t.Parallel()
	for k, fields := range kindFields {
		src := "limits:\n" + commonFields + fields
		p, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatalf("%v: %v", k, err)
		}
		l := p.Limits[0]
		if l.Kind != k || l.Name != "a" || l.HashTag != "{t}" || l.OnStoreError != "local" || l.When["r"] != "/x" || l.Capacity() < 3 {
			t.Errorf("%v: %+v", k, l)
		}
	}
	// The token bucket's other refill form, and no algorithm.
	for src, k := range map[string]policy.Kind{
		"limits:\n" + commonFields + "    capacity: 10\n    refill: 100/m\n":     policy.TokenBucket,
		"limits:\n" + commonFields + "    max_in_flight: 3\n    lease_ttl: 1s\n": policy.Concurrency,
	} {
		if p, err := policy.Parse([]byte(src)); err != nil || p.Limits[0].Kind != k {
			t.Errorf("%q: %v", src, err)
		}
	}
	for src, want := range map[string]string{
		"limits:\n  - {name: c, key: x, algorithm: concurrency, lease_ttl: 1s}\n":                    `field "max_in_flight": missing max_in_flight`,
		"limits:\n  - {name: c, key: x, algorithm: token_bucket, max_in_flight: 1, lease_ttl: 1s}\n": `field "algorithm": a max_in_flight limit takes no algorithm`,
	} {
		if _, err := policy.Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %s", src, err, want)
		}
	}
}

// A policy must have at least one limit.
func TestNoLimits(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"limits: []\n":                     `policy: line 1, column 9: field "limits": no limits: a policy must have at least one limit`,
		"costs: []\nlimits:   []\n":        `policy: line 2, column 11: field "limits": no limits: a policy must have at least one limit`,
		"limits:\n  # nothing yet\n  []\n": `policy: line 3, column 3: field "limits": no limits`,
		"limits: []\ncosts: [{cost: 0}]\n": "policy: 3 problems:\n  line 1, column 9: field \"limits\": no limits",
	} {
		_, err := policy.Parse([]byte(src))
		if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, policy.ErrInvalid) {
			t.Errorf("%q:\n got %v\nwant %s", src, err, want)
		}
	}
}

// misspell drops the second byte of s.
func misspell(s string) string { return s[:1] + s[2:] }

// Each field of each kind, misspelled, is reported with the field meant;
// a field far from every known one gets no suggestion.
func TestUnknownFieldSuggestion(t *testing.T) {
	t.Parallel()
	for k, fields := range kindFields {
		src := commonFields + fields
		for _, line := range strings.Split(strings.TrimSuffix(src, "\n"), "\n") {
			field, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "- "), ":")
			bad := misspell(field)
			mutated := "limits:\n" + strings.Replace(src, field+":", bad+":", 1)
			_, err := policy.Parse([]byte(mutated))
			var es policy.Errors
			if !errors.As(err, &es) {
				t.Fatalf("%v %s: got %v", k, bad, err)
			}
			want := fmt.Sprintf("(did you mean %s?)", field)
			i := slices.IndexFunc(es, func(e *policy.Error) bool { return e.Field == bad })
			if i < 0 || !strings.HasPrefix(es[i].Msg, "unknown field") || !strings.HasSuffix(es[i].Msg, want) {
				t.Errorf("%v: %s for %s:\n got %v\nwant %s", k, bad, field, err, want)
			}
		}
		_, err := policy.Parse([]byte("limits:\n" + commonFields + fields + "    colour: red\n"))
		if want := fmt.Sprintf("field \"colour\": unknown field for a %s limit", k); err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%v: got %v\nwant %s (and no suggestion)", k, err, want)
		}
	}
	for src, want := range map[string]string{
		"limits:\n  - {name: a, key: x, capacity: 1, refil_per_second: 5}\n":                                        `field "refil_per_second": unknown field for a token_bucket limit (did you mean refill_per_second?)`,
		"limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s, window: 1m}\n":                                    `field "window": unknown field for a token_bucket limit (it is a field of sliding_window and fixed_window limits)`,
		"limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s, lease_ttl: 1s}\n":                                 `field "lease_ttl": unknown field for a token_bucket limit (it is a field of concurrency limits)`,
		"limits:\n  - {name: a, key: x, algorithm: leaky, limit: 1, window: 1m, capactiy: 1}\n":                     `field "capactiy": unknown field (did you mean capacity?)`,
		"limits:\n  - {name: a, key: x, algorithm: slidng_window, limit: 1, window: 1m}\n":                          `field "algorithm": unknown algorithm "slidng_window" (did you mean sliding_window?)`,
		"limits:\n  - {name: a, key: x, algorithm: leaky, limit: 1, window: 1m}\n":                                  `field "algorithm": unknown algorithm "leaky" (want token_bucket, sliding_window, fixed_window, concurrency or quota)`,
		"limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s, on_store_error: fail-open}\n":                     `field "on_store_error": "fail-open" is not fail_open, fail_closed or local (did you mean fail_open?)`,
		"limts:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n":                                                 `field "limts": unknown field (did you mean limits?)`,
		"LIMITS: []\nlimits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n":                                    `field "LIMITS": unknown field (did you mean limits?)`,
		"cost: []\nlimits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n":                                      `field "cost": unknown field (did you mean costs?)`,
		"policy: 1\nlimits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n":                                     `field "policy": unknown field (want limits, costs, redact, request_descriptors, allow_unmatched, overrides, prices, default_price, priorities or default_priority)`,
		"limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\ncosts:\n  - {wen: {a: b}, cost: 1}\n":            `field "wen": unknown field in a cost rule (did you mean when?)`,
		"limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\ncosts:\n  - {when: {a: b}, cots: 1}\n":           `field "cots": unknown field in a cost rule (did you mean cost?)`,
		"limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\ncosts:\n  - {when: {a: b}, cost: 1, price: 2}\n": `field "price": unknown field in a cost rule (want when or cost)`,
	} {
		if _, err := policy.Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant %s", src, err, want)
		}
	}
}

// A file of MaxFileSize with ~75,000 distinct fields in one mapping parses
// in linear time: about 0.5 s here, where a quadratic check for repeated
// keys took 50 s. The bound leaves 20x for a loaded machine.
func TestManyFieldsLinear(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("timing test: not under -short or -race")
	}
	var b strings.Builder
	b.WriteString("limits:\n  - name: a\n    key: x\n")
	for i := 0; b.Len() < policy.MaxFileSize-100; i++ {
		fmt.Fprintf(&b, "    f%d: 1\n", i)
	}
	start := time.Now()
	_, err := policy.Parse([]byte(b.String()))
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("%v to parse %d bytes", d, b.Len())
	}
	var es policy.Errors
	if !errors.As(err, &es) || len(es) < 70_000 {
		t.Fatalf("want an unknown-field error per field, got %d", len(es))
	}
}

// A calendar quota parses with its period and zone (UTC by default), and
// its kind's fields only.
func TestQuotaLimit(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte(`limits:
  - name: monthly_tokens
    key: "tenant:{tenant}"
    algorithm: quota
    limit: 1000000
    period: month
    timezone: Europe/Berlin
  - name: daily
    key: "user:{user}"
    algorithm: quota
    limit: 10000
    period: day
`))
	if err != nil {
		t.Fatal(err)
	}
	m, d := p.Limit("monthly_tokens"), p.Limit("daily")
	if m.Kind != policy.Quota || m.Quota.Limit != 1000000 || m.Quota.Period.String() != "month" || m.Quota.Zone() != "Europe/Berlin" || m.Capacity() != 1000000 {
		t.Fatalf("monthly: %+v", m)
	}
	if d.Quota.Zone() != "UTC" || d.Quota.Period.String() != "day" || d.Span() != 24*time.Hour {
		t.Fatalf("daily: %+v", d)
	}
	_, err = policy.Parse([]byte("limits:\n  - {name: q, key: x, algorithm: quota, limit: 1, period: day, window: 1m}\n"))
	if err == nil || !strings.Contains(err.Error(), `field "window": unknown field for a quota limit (it is a field of sliding_window and fixed_window limits)`) {
		t.Fatalf("window on a quota: %v", err)
	}
}
