package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

const redactSrc = `redact: [api_key, user]
limits:
  - name: k
    key: "k:{api_key}:u:{user}:t:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: tenant
    key: "tenant:{tenant}:route:{route}"
    when: {route: "/e:x"}
    capacity: 10
    refill_per_second: 1
`

func TestRedactParse(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte(redactSrc))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Redact, []string{"api_key", "user"}) || !p.Redacts("api_key") || !p.Redacts("user") || p.Redacts("tenant") {
		t.Fatalf("Redact %q", p.Redact)
	}
	if sum := sha256.Sum256([]byte(redactSrc)); p.Version != hex.EncodeToString(sum[:8]) {
		t.Fatalf("Version %s is not the hash of the file", p.Version)
	}
	var nilPolicy *policy.Policy
	if nilPolicy.Redacts("api_key") {
		t.Fatal("a nil policy redacts")
	}
	if p, err := policy.Parse([]byte("redact: []\nlimits: [{name: a, key: x, capacity: 1, refill: 1/s}]\n")); err != nil || len(p.Redact) != 0 {
		t.Fatalf("redact: []: %v %v", p, err)
	}
	src := "limits: [{name: a, key: \"k:{a}:{b.c-d_1}\", capacity: 1, refill: 1/s}]\nredact:\n  - a\n  - \"b c\"\n  - a\n  - [x]\n  - ~\n  - \"\"\n  - b.c-d_1\n"
	want := []where{{4, 5, "", "redact"}, {5, 5, "", "redact"}, {6, 5, "", "redact"}, {7, 5, "", "redact"}, {8, 5, "", "redact"}}
	if got := problems(t, src); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	for src, want := range map[string]string{
		src: `policy: 5 problems:
  line 4, column 5: field "redact": descriptor name "b c" must be letters, digits, _ - or .
  line 5, column 5: field "redact": "a" given twice (first at line 3)
  line 6, column 5: field "redact": each entry must be a descriptor name
  line 7, column 5: field "redact": each entry must be a descriptor name
  line 8, column 5: field "redact": descriptor name "" must be letters, digits, _ - or .`,
		"redact: api_key\nlimits: [{name: a, key: x, capacity: 1, refill: 1/s}]\n": `policy: line 1, column 9: field "redact": must be a list of descriptor names`,
		"redact:\nlimits: [{name: a, key: x, capacity: 1, refill: 1/s}]\n":         `policy: line 1, column 8: field "redact": must be a list of descriptor names`,
		"redcat: [a]\nlimits: [{name: a, key: x, capacity: 1, refill: 1/s}]\n":     `policy: line 1, column 1: field "redcat": unknown field (did you mean redact?)`,
		// a name no limit's key uses redacts nothing: a misspelling, most likely
		"redact: [user, api_kye]\nlimits: [{name: a, key: \"k:{api_key}:{user}\", capacity: 1, refill: 1/s}]\n": `policy: line 1, column 16: field "redact": "api_kye" is not a descriptor of any limit's key, so it would redact nothing (did you mean api_key?)`,
		"limits: [{name: a, key: \"k:{tenant}\", capacity: 1, refill: 1/s}]\nredact: [user]\n":                  `policy: line 2, column 10: field "redact": "user" is not a descriptor of any limit's key, so it would redact nothing (want tenant)`,
		"limits: [{name: a, key: x, capacity: 1, refill: 1/s}]\nredact: [user]\n":                               `policy: line 2, column 10: field "redact": "user" is not a descriptor of any limit's key, so it would redact nothing`,
		// a limit in error says so, and only that (its key's names are not "unused")
		"redact: [api_key]\nlimits: [{name: a, key: \"k:{api_key}\", capacity: 0, refill: 1/s}]\n": `policy: line 2, column 50: limit "a": field "capacity": capacity 0 must be at least 1`,
	} {
		if _, err := policy.Parse([]byte(src)); err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", src, err, want)
		}
	}
}

// hash8 is the redacted form of v.
func hash8(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "#" + hex.EncodeToString(sum[:4])
}

func TestDisplayKey(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte(redactSrc))
	if err != nil {
		t.Fatal(err)
	}
	k, tenant := p.Limit("k"), p.Limit("tenant")
	desc := map[string]string{"api_key": "s:%{x}", "user": "bob", "tenant": "a:b%{c}", "route": "/e:x"}
	got, ok := p.DisplayKey(k, desc)
	// Redacted values are hashed raw; the others escaped as Match does.
	want := "k:" + hash8("s:%{x}") + ":u:" + hash8("bob") + ":t:a%3Ab%25%7Bc%7D"
	if !ok || got != want {
		t.Fatalf("DisplayKey %q %v, want %q", got, ok, want)
	}
	if got != "k:#b9321f92:u:#81b637d8:t:a%3Ab%25%7Bc%7D" {
		t.Fatalf("DisplayKey %q: the hash form changed", got)
	}
	if key, _ := k.Match(desc); strings.Contains(key, "bob") == strings.Contains(got, "bob") {
		t.Fatalf("Match %q must show the value, DisplayKey %q must not", key, got)
	}
	// No redacted placeholder: exactly Match's key, escaping included.
	key, _ := tenant.Match(desc)
	if got, ok := p.DisplayKey(tenant, desc); !ok || got != key || got != "tenant:a%3Ab%25%7Bc%7D:route:/e%3Ax" {
		t.Fatalf("DisplayKey %q %v, Match %q", got, ok, key)
	}
	// A policy redacting nothing displays every key as Match.
	var none policy.Policy
	if got, ok := none.DisplayKey(k, desc); !ok || got != must(k.Match(desc)) {
		t.Fatalf("no redaction: %q", got)
	}
	// No match: false, dst unchanged.
	for _, d := range []map[string]string{
		{"api_key": "s", "user": "u"},                      // no tenant
		{"tenant": "a", "route": "/other", "api_key": "s"}, // when fails
		{"api_key": "s", "tenant": "a", "route": "/e:x"},   // no user, after api_key was rendered
	} {
		for _, l := range []*policy.Limit{k, tenant} {
			if _, want := l.Match(d); want {
				continue
			}
			dst := []byte("prefix")
			if out, ok := p.AppendDisplayKey(dst, l, d); ok || string(out) != "prefix" {
				t.Errorf("%s %v: %q %v", l.Name, d, out, ok)
			}
		}
	}
}

func must(s string, ok bool) string {
	if !ok {
		panic("no match")
	}
	return s
}

func TestAppendDisplayKeyNoAlloc(t *testing.T) {
	p, err := policy.Parse([]byte(redactSrc))
	if err != nil {
		t.Fatal(err)
	}
	k := p.Limit("k")
	desc := map[string]string{"api_key": strings.Repeat("k", 100), "user": "bob", "tenant": "a:b"}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := p.AppendDisplayKey(buf[:0], k, desc); !ok {
			t.Fatal("no match")
		}
	}); n != 0 {
		t.Fatalf("%v allocations with room in dst", n)
	}
}

// The package doc's example is a valid policy.
func TestDocExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("policy.go")
	if err != nil {
		t.Fatal(err)
	}
	var yaml strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		if s, ok := strings.CutPrefix(line, "//\t"); ok {
			yaml.WriteString(s + "\n")
		}
		if strings.HasPrefix(line, "package ") {
			break
		}
	}
	p, err := policy.Parse([]byte(yaml.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml.String())
	}
	if len(p.Limits) != 4 || len(p.Costs) != 1 || !slices.Equal(p.Redact, []string{"api_key", "user"}) {
		t.Fatalf("%+v", p)
	}
}
