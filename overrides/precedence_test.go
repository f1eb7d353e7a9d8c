package overrides_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

const precPolicy = `limits:
  - name: l
    key: "{a}:{b}:{c}"
    capacity: 100
    refill_per_second: 10
`

func put(t testing.TB, s *overrides.Set, o overrides.Override) {
	t.Helper()
	if o.Name == "" {
		o.Name = "l"
	}
	if err := s.Put(&o); err != nil {
		t.Fatalf("Put(%v): %v", o.Match, err)
	}
}

func m(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestPrecedenceTable(t *testing.T) {
	p := mustPolicy(t, precPolicy)
	now := time.Now()
	for _, c := range []struct {
		name  string
		match []map[string]string
		desc  map[string]string
		want  string // canonical match of the winner; "" none
	}{
		{"exact over prefix", []map[string]string{m("a", "ac*"), m("a", "acme")}, m("a", "acme"), `{"a":"acme"}`},
		{"prefix over any", []map[string]string{m("a", "*"), m("a", "ac*")}, m("a", "acme"), `{"a":"ac*"}`},
		{"longest prefix", []map[string]string{m("a", "a*"), m("a", "acm*"), m("a", "ac*")}, m("a", "acme"), `{"a":"acm*"}`},
		{"prefix may be the whole value", []map[string]string{m("a", "acme*"), m("a", "ac*")}, m("a", "acme"), `{"a":"acme*"}`},
		{"more exact beats longer prefix", []map[string]string{m("a", "acme", "b", "*"), m("a", "acme*", "b", "x*")}, m("a", "acme", "b", "xyz"), `{"a":"acme","b":"*"}`},
		{"two exact beat one", []map[string]string{m("a", "acme"), m("a", "acme", "b", "x")}, m("a", "acme", "b", "x"), `{"a":"acme","b":"x"}`},
		{"more prefixes beat fewer", []map[string]string{m("a", "acme", "b", "xyz*"), m("a", "acme", "b", "x*", "c", "q*")}, m("a", "acme", "b", "xyz", "c", "q"), `{"a":"acme","b":"x*","c":"q*"}`},
		{"prefix sums across names", []map[string]string{m("b", "x*", "c", "qrs*"), m("b", "xyz*", "c", "q*")}, m("b", "xyz", "c", "qrs"), `{"b":"x*","c":"qrs*"}`},
		{"tie by canonical JSON", []map[string]string{m("b", "*"), m("a", "*")}, m("a", "1", "b", "2"), `{"a":"*"}`},
		{"tie of equal sums", []map[string]string{m("b", "xy*", "c", "q*"), m("b", "x*", "c", "qr*")}, m("b", "xyz", "c", "qrs"), `{"b":"x*","c":"qr*"}`},
		{"any needs the descriptor", []map[string]string{m("c", "*")}, m("a", "1"), ""},
		{"empty match is least specific", []map[string]string{{}, m("a", "*")}, m("a", "1"), `{"a":"*"}`},
		{"empty match applies", []map[string]string{{}}, m("a", "1"), `{}`},
		{"no match", []map[string]string{m("a", "b*"), m("a", "x")}, m("a", "acme"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := overrides.NewSet(p)
			for _, mt := range c.match {
				put(t, s, overrides.Override{Match: mt, Params: overrides.Params{Capacity: 5}})
			}
			r := s.Resolve("l", c.desc, now)
			got := ""
			if r != nil {
				got = r.CanonicalMatch()
			}
			if got != c.want {
				t.Fatalf("winner %s, want %s", got, c.want)
			}
		})
	}
}

func TestExpiryIsExact(t *testing.T) {
	s := overrides.NewSet(mustPolicy(t, precPolicy))
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	o := overrides.Override{Match: m("a", "acme"), TTL: 10}
	o.Stamp(at, time.Time{})
	put(t, s, o)
	put(t, s, overrides.Override{Match: m("a", "ac*")})
	desc := m("a", "acme")
	if r := s.Resolve("l", desc, at.Add(10*time.Second-time.Millisecond)); r == nil || r.CanonicalMatch() != `{"a":"acme"}` {
		t.Fatalf("a millisecond before the expiry: %v", r)
	}
	if r := s.Resolve("l", desc, at.Add(10*time.Second)); r == nil || r.CanonicalMatch() != `{"a":"ac*"}` {
		t.Fatalf("at the expiry the next override applies; got %v", r)
	}
	if n := s.Sweep(at.Add(10 * time.Second)); n != 1 || s.Count("l") != 1 {
		t.Fatalf("Sweep removed %d, %d left", n, s.Count("l"))
	}
}

// reference is the precedence of the package documentation, written
// plainly: every live matching override, sorted.
func reference(os []overrides.Override, desc map[string]string, now time.Time) string {
	type cand struct {
		exact, prefix, sum int
		canon              string
	}
	var cs []cand
	for _, o := range os {
		if o.Expired(now) {
			continue
		}
		ok := true
		c := cand{canon: overrides.CanonicalMatch(o.Match)}
		for k, v := range o.Match {
			d, has := desc[k]
			switch {
			case !has:
				ok = false
			case v == "*":
			case strings.HasSuffix(v, "*"):
				ok = ok && strings.HasPrefix(d, v[:len(v)-1])
				c.prefix++
				c.sum += len(v) - 1
			default:
				ok = ok && d == v
				c.exact++
			}
		}
		if ok {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return ""
	}
	return slices.MinFunc(cs, func(a, b cand) int {
		return cmp.Or(-cmp.Compare(a.exact, b.exact), -cmp.Compare(a.prefix, b.prefix), -cmp.Compare(a.sum, b.sum), strings.Compare(a.canon, b.canon))
	}).canon
}

// TestPrecedenceProperty checks Resolve against reference on random sets
// of overrides over a small alphabet (so that they overlap), with
// deletions and expiries.
func TestPrecedenceProperty(t *testing.T) {
	p := mustPolicy(t, precPolicy)
	rng := rand.New(rand.NewPCG(1, 2))
	vals := []string{"", "a", "ab", "abc", "b", "ba", "abd"}
	pattern := func() string {
		v := vals[rng.IntN(len(vals))]
		switch rng.IntN(3) {
		case 0:
			return v
		case 1:
			if v == "" {
				return "*"
			}
			return v + "*"
		}
		return "*"
	}
	now := time.Unix(1_800_000_000, 0)
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for round := range rounds {
		s := overrides.NewSet(p)
		live := map[overrides.Key]overrides.Override{}
		for range 1 + rng.IntN(40) {
			mt := map[string]string{}
			for _, k := range []string{"a", "b", "c"} {
				if rng.IntN(2) == 0 {
					mt[k] = pattern()
				}
			}
			o := overrides.Override{Name: "l", Match: mt, Params: overrides.Params{Capacity: int64(1 + rng.IntN(9))}}
			if rng.IntN(4) == 0 {
				o.ExpiresAt = now.Add(time.Duration(rng.IntN(3)-1) * time.Second)
			}
			put(t, s, o)
			live[o.Key()] = o
			if rng.IntN(5) == 0 { // delete one
				for k, d := range live {
					if err := s.Delete(k.Name, d.Match); err != nil {
						t.Fatal(err)
					}
					delete(live, k)
					break
				}
			}
		}
		var all []overrides.Override
		for _, o := range live {
			all = append(all, o)
		}
		for range 30 {
			desc := map[string]string{}
			for _, k := range []string{"a", "b", "c"} {
				if rng.IntN(4) != 0 {
					desc[k] = vals[rng.IntN(len(vals))] + []string{"", "x"}[rng.IntN(2)]
				}
			}
			want := reference(all, desc, now)
			got := ""
			if r := s.Resolve("l", desc, now); r != nil {
				got = r.CanonicalMatch()
				if r.Params().Capacity != live[overrides.KeyOf("l", r.Match())].Capacity {
					t.Fatalf("round %d: the winner's parameters are not its own", round)
				}
			}
			if got != want {
				t.Fatalf("round %d: descriptors %v: Resolve chose %s, the reference %s; overrides:\n%s", round, desc, got, want, dump(all))
			}
		}
	}
}

func dump(os []overrides.Override) string {
	var b strings.Builder
	for _, o := range os {
		fmt.Fprintf(&b, "  %s expires %v\n", overrides.CanonicalMatch(o.Match), o.ExpiresAt)
	}
	return b.String()
}
