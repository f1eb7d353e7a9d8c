package policy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

func TestExamplePolicy(t *testing.T) {
	t.Parallel()
	p, err := policy.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Limits) != 5 || len(p.Costs) != 2 || len(p.Version) != 16 {
		t.Fatalf("%+v", p)
	}
	g := p.Limit("global")
	if g.Kind != policy.TokenBucket || g.Bucket != (bucket.Limit{Capacity: 1000, Rate: 500}) || g.Line != 3 {
		t.Fatalf("global %+v", g)
	}
	if u := p.Limit("user_daily"); u.Kind != policy.SlidingWindow || u.Window != (window.Limit{Limit: 10000, Window: 24 * time.Hour}) {
		t.Fatalf("user_daily %+v", u)
	}
	if c := p.Limit("tool_calls"); c.Kind != policy.Concurrency || c.MaxInFlight != 5 || c.SlotTTL != 30*time.Second {
		t.Fatalf("tool_calls %+v", c)
	}
	desc := map[string]string{"tenant": "acme", "route": "/export", "user": "u:1"}
	for name, want := range map[string]string{
		"global": "global", "tenant_api": "tenant:acme", "tenant_export": "tenant:acme:route:/export", "user_daily": "user:u%3A1",
	} {
		if key, ok := p.Limit(name).Match(desc); !ok || key != want {
			t.Errorf("%s: %q %v, want %q", name, key, ok, want)
		}
	}
	if _, ok := p.Limit("tool_calls").Match(desc); ok {
		t.Error("tool_calls applied without api_key")
	}
	if _, ok := p.Limit("tenant_export").Match(map[string]string{"tenant": "acme", "route": "/search"}); ok {
		t.Error("tenant_export applied to /search")
	}
	if p.Cost(desc) != 20 || p.Cost(map[string]string{"route": "/search"}) != 3 || p.Cost(nil) != 1 {
		t.Error("costs")
	}
}

func TestRefillForms(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]float64{"100/m": 100.0 / 60, "1/h": 1.0 / 3600, "5/s": 5, "2/d": 2.0 / 86400, "0.5/sec": 0.5} {
		if got, err := policy.ParseRate(s); err != nil || got != want {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
	for _, s := range []string{"", "100", "x/m", "-1/m", "0/s", "1/fortnight", "NaN/s", "Inf/s"} {
		if _, err := policy.ParseRate(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// Each error names the line, the limit and the field.
func TestErrorsNameLineLimitField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"limits:\n  - name: a\n    key: x\n    capacity: 10\n    refill_per_second: 1\n    capcity: 3\n",
			`line 6, column 5: limit "a": field "capcity": unknown field for a token_bucket limit`},
		{"limits:\n  - name: a\n    key: x\n    capacity: 10\n    refill_per_second: 1\n  - name: a\n    key: y\n    capacity: 1\n    refill_per_second: 1\n",
			`line 6, column 11: limit "a": field "name": duplicate name (first at line 2)`},
		{"limits:\n  - name: a\n    capacity: 10\n    refill_per_second: 1\n",
			`limit "a": field "key": missing or empty key template`},
		{"limits:\n  - name: a\n    key: \"t:{tenant\"\n    capacity: 10\n    refill_per_second: 1\n",
			`line 3, column 10: limit "a": field "key": unclosed { in key template`},
		{"limits:\n  - name: a\n    key: \"t:{ten ant}\"\n    capacity: 10\n    refill_per_second: 1\n",
			`field "key": placeholder {ten ant} must be a descriptor name`},
		{"limits:\n  - name: a\n    key: x\n    capacity: 0\n    refill_per_second: 1\n",
			`line 4, column 15: limit "a": field "capacity": capacity 0 must be at least 1`},
		{"limits:\n  - name: a\n    key: x\n    capacity: 5\n    refill_per_second: 0\n",
			`line 5, column 24: limit "a": field "refill_per_second": rate 0 must be positive`},
		{"limits:\n  - name: a\n    key: x\n    capacity: 5\n    refill: \"-3/m\"\n",
			`field "refill": refill "-3/m" must be positive`},
		{"limits:\n  - name: w\n    key: x\n    algorithm: sliding_window\n    limit: 10\n    window: 0s\n",
			`line 6, column 13: limit "w": field "window": window 0s must be positive`},
		{"limits:\n  - name: w\n    key: x\n    algorithm: leaky\n",
			`field "algorithm": unknown algorithm "leaky"`},
		{"limits:\n  - name: a\n    key: x\n    capacity: 10\n    refill_per_second: 1\ncosts:\n  - when: {route: /e}\n    cost: 11\n",
			`line 8, column 11: field "cost": cost 11 exceeds the capacity 10 of limit "a" (line 2), which every request of this class hits`},
		{"limits:\n  - name: a\n    key: \"r:{route}\"\n    when: {route: /e}\n    capacity: 10\n    refill_per_second: 1\ncosts:\n  - when: {route: /e}\n    cost: 11\n",
			`line 9, column 11: field "cost": cost 11 exceeds the capacity 10 of limit "a" (line 2)`},
		{"limits:\n  - name: c\n    key: x\n    max_in_flight: 0\n    lease_ttl: 1s\n",
			`field "max_in_flight": max_in_flight 0 must be at least 1`},
		{"limits: [\n", `line 1: YAML: did not find expected node content`},
		{"", `empty policy`},
		{"limitz: []\n", `field "limitz": unknown field`},
		{"limits:\n  - name: a\n    key: \"t:{tenant}\"\n    hash_tag: \"{user}\"\n    capacity: 10\n    refill_per_second: 1\n",
			`line 4, column 15: limit "a": field "hash_tag": placeholder {user} is not in the key template "t:{tenant}"`},
		{"limits:\n  - name: a\n    key: \"t:{tenant}\"\n    hash_tag: \"\"\n    capacity: 10\n    refill_per_second: 1\n",
			`field "hash_tag": empty hash_tag`},
	} {
		_, err := policy.Parse([]byte(tc.src))
		if err == nil || !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
	// A cost rule for requests a limit never sees, or may not see, is fine.
	for _, ok := range []string{
		"limits:\n  - name: a\n    key: x\n    when: {route: /a}\n    capacity: 10\n    refill_per_second: 1\ncosts:\n  - when: {route: /e}\n    cost: 11\n",
		"limits:\n  - name: a\n    key: \"t:{tenant}\"\n    capacity: 10\n    refill_per_second: 1\ncosts:\n  - when: {route: /e}\n    cost: 11\n",
	} {
		if _, err := policy.Parse([]byte(ok)); err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("limits:\n  - name: a\n    key: \"t:{x}\"\n    capacity: 3\n    refill: 1/s\n"))
	f.Add([]byte("limits:\n  - name: w\n    key: u\n    algorithm: sliding_window\n    limit: 5\n    window: 7d\ncosts:\n  - when: {a: b}\n    cost: 2\n"))
	f.Add([]byte("limits: [{name: c, key: k, max_in_flight: 2, lease_ttl: 1s}]"))
	f.Add([]byte("redact: [x]\nlimits: [{name: a, key: \"k:{x}:{a}\", capacity: 3, refill_per_second: 1}]\n"))
	f.Add([]byte("limits:\n  - {name: a, key: x, capacity: 0, refil: 1/s, algorithm: slidng_window}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := policy.Parse(src)
		if err != nil {
			if !errors.Is(err, policy.ErrInvalid) || p != nil {
				t.Fatalf("error %v with policy %v", err, p)
			}
			return
		}
		for _, l := range p.Limits {
			if l.Name == "" || l.Key == "" || l.Capacity() < 1 {
				t.Fatalf("invalid limit accepted: %+v", l)
			}
			if l.Kind == policy.TokenBucket && l.Bucket.Validate() != nil {
				t.Fatalf("invalid bucket accepted: %+v", l.Bucket)
			}
			desc := map[string]string{"x": "1:%{", "a": "b"}
			key, ok := l.Match(desc)
			shown, shownOK := p.DisplayKey(l, desc)
			if ok != shownOK || !slices.ContainsFunc(l.Placeholders(), p.Redacts) && shown != key {
				t.Fatalf("Match %q %v, DisplayKey %q %v", key, ok, shown, shownOK)
			}
		}
	})
}

func TestHashTag(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte("limits:\n  - name: a\n    key: \"t:{tenant}:u:{user}\"\n    hash_tag: \"{tenant}\"\n    capacity: 10\n    refill_per_second: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := p.Limits[0]
	desc := map[string]string{"tenant": "a{c}:m%", "user": "bob"}
	key, ok := l.Match(desc)
	if !ok || key != "t:a%7Bc%7D%3Am%25:u:bob" {
		t.Fatalf("key %q %v: braces, colons and percent signs in values must be escaped", key, ok)
	}
	if tag := string(l.AppendHashTag(nil, desc)); tag != "{a%7Bc%7D%3Am%25}" {
		t.Fatalf("tag %q", tag)
	}
}
