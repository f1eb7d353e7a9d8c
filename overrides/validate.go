// Validation of an override against a policy, and the limit it puts in force.
package overrides

import (
	"math"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// mode is how a Match value matches a descriptor's value.
type mode uint8

const (
	modeExact  mode = iota // the value itself
	modePrefix             // "p*": values starting with p
	modeAny                // "*": any value
)

// parseValue returns how v matches and what it compares (the prefix
// without its "*"); an error for a "*" that is not the last byte.
func parseValue(v string) (mode, string, bool) {
	i := strings.IndexByte(v, '*')
	switch {
	case i < 0:
		return modeExact, v, true
	case i != len(v)-1:
		return 0, "", false
	case v == "*":
		return modeAny, "", true
	}
	return modePrefix, v[:i], true
}

// checkFields validates what o says on its own, without a policy: every
// problem is ErrBadRequest.
func (o *Override) checkFields() *Error {
	bad := func(field, format string, args ...any) *Error {
		return errorf(ErrBadRequest, o.Name, field, format, args...)
	}
	switch {
	case o.Name == "":
		return bad("name", "missing name (the policy limit the override changes)")
	case len(o.Match) > MaxMatch:
		return bad("match", "%d descriptors exceed the maximum %d", len(o.Match), MaxMatch)
	}
	for _, k := range sortedKeys(o.Match) {
		v := o.Match[k]
		if !validName(k) {
			return bad("match", "descriptor name %q must be letters, digits, _ - or .", k)
		}
		if len(v) > MaxValue || !utf8.ValidString(v) {
			return bad("match", "value of %q must be valid UTF-8 of at most %d bytes", k, MaxValue)
		}
		if _, _, ok := parseValue(v); !ok {
			return bad("match", "value %q of %q: \"*\" may only end a value (\"premium_*\") or be the whole value", v, k)
		}
	}
	p := &o.Params
	for _, c := range []struct {
		field string
		neg   bool
	}{{"capacity", p.Capacity < 0}, {"limit", p.Limit < 0}, {"max_in_flight", p.MaxInFlight < 0},
		{"window", p.Window < 0}, {"block_for", p.BlockFor < 0}, {"ttl_s", o.TTL < 0}} {
		if c.neg {
			return bad(c.field, "must be positive")
		}
	}
	switch {
	case p.RefillPerSecond < 0 || math.IsNaN(p.RefillPerSecond) || math.IsInf(p.RefillPerSecond, 0):
		return bad("refill_per_second", "rate %v must be positive and finite", p.RefillPerSecond)
	case p.RefillPerSecond != 0 && p.Refill != "":
		return bad("refill", "give refill_per_second or refill, not both")
	case o.TTL > MaxTTL:
		return bad("ttl_s", "ttl_s %d exceeds the maximum %d (100 years)", o.TTL, MaxTTL)
	case len(o.Note) > MaxNote:
		return bad("note", "note of %d bytes exceeds the maximum %d", len(o.Note), MaxNote)
	case o.Source != "" && o.Source != SourceAPI && o.Source != SourcePolicy:
		return bad("source", "source %q is not api or policy", o.Source)
	case p.Unlimited && p.Deny:
		return bad("deny", "give unlimited or deny, not both")
	}
	if p.Refill != "" {
		if _, err := policy.ParseRate(p.Refill); err != nil {
			return bad("refill", "%v", err)
		}
	}
	if p.Unlimited || p.Deny {
		what := "deny"
		if p.Unlimited {
			what = "unlimited"
		}
		if g := p.given(); len(g) > 0 {
			return bad(what, "%s takes no parameters (%s given)", what, strings.Join(g, ", "))
		}
		if p.BlockFor > 0 {
			return bad("block_for", "%s takes no block_for", what)
		}
	}
	return nil
}

// Validate reports whether o is a valid override of policy p: nil, or an
// *Error matching ErrBadRequest (o's own fields), ErrUnknownLimit (no
// limit o.Name in p), ErrUnknownDescriptor (a Match name that is neither a
// placeholder of the limit's key template nor a name of its when),
// ErrKindMismatch (a parameter the limit's kind does not take) or
// ErrBadRequest again (the limit o puts in force breaks the policy file's
// rules, e.g. a capacity above the maximum, or shadow on a concurrency
// limit). It checks in that order and reports the first problem.
func Validate(o *Override, p *policy.Policy) error {
	if _, err := compile(o, p); err != nil {
		return err
	}
	return nil
}

// Effective returns the limit in force for the requests o applies to: a
// copy of p's limit o.Name with o's parameters applied (Shadow set when o
// is a shadow override), or Validate's error. For Deny and Unlimited the
// limit is the policy's (unchanged parameters).
func Effective(o *Override, p *policy.Policy) (*policy.Limit, error) {
	c, err := compile(o, p)
	if err != nil {
		return nil, err
	}
	return c.lim, nil
}

// compiled is what equal Params compile to on one policy limit, shared by
// the rules that have them.
type compiled struct {
	params Params
	lim    *policy.Limit // the effective limit
	spec   *store.Spec   // its store spec (OnStoreError the policy limit's); nil for Deny and Unlimited
	// spec without BlockFor (spec itself when it has none), for a limiter
	// that puts every limit in shadow mode
	unblocked *store.Spec
}

// compile validates o against p and compiles its parameters.
func compile(o *Override, p *policy.Policy) (*compiled, *Error) {
	if err := o.checkFields(); err != nil {
		return nil, err
	}
	lim := p.Limit(o.Name)
	if lim == nil {
		return nil, errorf(ErrUnknownLimit, o.Name, "name", "the policy has no limit %q", o.Name)
	}
	if err := checkMatch(o.Match, lim); err != nil {
		return nil, err
	}
	return compileParams(&o.Params, lim)
}

// checkMatch checks that every name of m is a descriptor lim uses, and
// that a value for a when descriptor can match the value when requires.
func checkMatch(m map[string]string, lim *policy.Limit) *Error {
	for _, k := range sortedKeys(m) {
		want, inWhen := lim.When[k]
		if !inWhen && !slices.Contains(lim.Placeholders(), k) {
			used := append(append([]string(nil), lim.Placeholders()...), sortedKeys(lim.When)...)
			return errorf(ErrUnknownDescriptor, lim.Name, "match",
				"limit %q does not use descriptor %q (its key template %q and its when use %s)", lim.Name, k, lim.Key, quoteList(used))
		}
		if inWhen && !matchValue(m[k], want) {
			return errorf(ErrBadRequest, lim.Name, "match",
				"value %q of %q can never match: limit %q applies only when %s is %q", m[k], k, lim.Name, k, want)
		}
	}
	return nil
}

// compileParams applies p to a copy of lim and compiles it.
func compileParams(p *Params, lim *policy.Limit) (*compiled, *Error) {
	eff := *lim
	c := &compiled{params: *p, lim: &eff}
	eff.Shadow = lim.Shadow || p.Shadow
	kd := kindOf(lim.Kind)
	for _, f := range p.given() {
		if kd == nil || !slices.Contains(kd.fields, f) {
			return nil, errorf(ErrKindMismatch, lim.Name, f, "%s is a field of %s; limit %q is a %s limit", f, owners(f), lim.Name, lim.Kind)
		}
	}
	if p.Shadow && kd != nil && kd.noShadow != "" {
		return nil, errorf(ErrBadRequest, lim.Name, "shadow", "%s", kd.noShadow)
	}
	if p.BlockFor > 0 && !lim.Kind.Blockable() {
		return nil, errorf(ErrKindMismatch, lim.Name, "block_for", "block_for is a field of token_bucket, sliding_window, fixed_window and quota limits; limit %q is a %s limit", lim.Name, lim.Kind)
	}
	if p.BlockFor > 0 {
		eff.BlockFor = p.BlockFor
	}
	if p.Deny || p.Unlimited {
		return c, nil
	}
	if kd != nil {
		if err := kd.apply(&eff, p); err != nil {
			return nil, err
		}
	}
	sp, err := store.NewSpec(eff.StoreLimit())
	if err != nil {
		return nil, errorf(ErrBadRequest, lim.Name, "", "%s", strings.TrimPrefix(err.Error(), "sluice: "))
	}
	sp.OnStoreError = eff.OnStoreError
	c.spec, c.unblocked = sp, sp
	if sp.BlockFor > 0 {
		ub := *sp
		ub.BlockFor = 0
		c.unblocked = &ub
	}
	return c, nil
}

// matchValue reports whether pattern (exact, "p*" or "*") matches v.
func matchValue(pattern, v string) bool {
	m, s, _ := parseValue(pattern)
	switch m {
	case modeExact:
		return v == s
	case modePrefix:
		return strings.HasPrefix(v, s)
	}
	return true
}

// Matches reports whether o's Match matches a request with these
// descriptors (expiry aside): every descriptor it names is present, with
// a value its pattern matches.
func (o *Override) Matches(desc map[string]string) bool {
	for k, pat := range o.Match {
		v, ok := desc[k]
		if !ok || !matchValue(pat, v) {
			return false
		}
	}
	return true
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func quoteList(s []string) string {
	if len(s) == 0 {
		return "no descriptor"
	}
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = `"` + x + `"`
	}
	return strings.Join(q, ", ")
}
