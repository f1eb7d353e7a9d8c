// Groups: the overrides of one limit that name the same descriptors in the
// same modes, indexed for Resolve (a map of exact values, tries of
// prefixes), and the precedence between their rules.
package overrides

import (
	"encoding/binary"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// Rule is an override compiled against its policy limit: what the
// decision path needs of it. A Rule is immutable but for its counters; a
// replaced or deleted override's Rule stays valid for whoever holds it.
type Rule struct {
	g       *group
	vals    string // the match's values, group.encode's encoding
	c       *compiled
	note    string
	ttl     int64
	created int64 // Unix ms
	updated int64
	expires int64 // Unix ms; 0: never
	policy  bool  // Source is SourcePolicy
	matched atomic.Uint64
	last    atomic.Int64 // Unix ns of the last Hit
}

// alive reports whether r has not expired at now (Unix ms).
func (r *Rule) alive(now int64) bool { return r.expires == 0 || now < r.expires }

// Name is the limit r changes.
func (r *Rule) Name() string { return r.g.ix.name }

// Spec is the store spec of the limit in force under r: the policy
// limit's with r's parameters, sharing its OnStoreError. It is shared by
// every rule of the limit with equal parameters (a limiter may key caches
// by it). Nil for Deny and Unlimited rules.
func (r *Rule) Spec() *store.Spec { return r.c.spec }

// ShadowSpec is Spec without a penalty box (BlockFor 0), for a limit in
// shadow mode by the limiter's choice (a shadow refusal blocks no key):
// Spec itself when it has no BlockFor, else one copy made at compile
// time, as shared as Spec. Nil for Deny and Unlimited rules.
func (r *Rule) ShadowSpec() *store.Spec { return r.c.unblocked }

// Limit is the limit in force under r (Effective's): do not modify it.
// For Deny and Unlimited rules it is the policy's limit.
func (r *Rule) Limit() *policy.Limit { return r.c.lim }

// Deny reports whether r refuses every request it applies to.
func (r *Rule) Deny() bool { return r.c.params.Deny }

// Unlimited reports whether r admits every request it applies to without
// a store write.
func (r *Rule) Unlimited() bool { return r.c.params.Unlimited }

// Shadow reports whether the limit in force under r is a shadow one (the
// override's shadow, or the policy limit's).
func (r *Rule) Shadow() bool { return r.c.lim.Shadow }

// BlockFor is r's block_for (0: the policy limit's).
func (r *Rule) BlockFor() time.Duration { return r.c.params.BlockFor }

// Params returns r's parameters as given.
func (r *Rule) Params() Params { return r.c.params }

// ExpiresAt is when r expires (zero: never).
func (r *Rule) ExpiresAt() time.Time { return msTime(r.expires) }

// Hit counts one decision r applied to, at now: MatchedTotal grows by one
// and LastMatchedAt becomes now (when it is later than the last one
// stored by more than a millisecond, so that hot rules do not write it on
// every decision). Safe for concurrent use; two atomic operations at most.
func (r *Rule) Hit(now time.Time) {
	r.matched.Add(1)
	ns := now.UnixNano()
	if ns-r.last.Load() > int64(time.Millisecond) {
		r.last.Store(ns)
	}
}

// Matched returns what Hit has counted.
func (r *Rule) Matched() (total uint64, last time.Time) {
	if ns := r.last.Load(); ns != 0 {
		last = time.Unix(0, ns).UTC()
	}
	return r.matched.Load(), last
}

// Match returns r's match (a new map).
func (r *Rule) Match() map[string]string {
	g := r.g
	m := make(map[string]string, len(g.exact)+len(g.prefix)+len(g.anyn))
	if g.rawKey() {
		m[g.exact[0]] = r.vals
	} else {
		rest := r.vals
		for _, n := range g.exact {
			m[n], rest = next(rest)
		}
		for _, n := range g.prefix {
			var p string
			p, rest = next(rest)
			m[n] = p + "*"
		}
	}
	for _, n := range g.anyn {
		m[n] = "*"
	}
	return m
}

// CanonicalMatch returns CanonicalMatch(r.Match()).
func (r *Rule) CanonicalMatch() string { return CanonicalMatch(r.Match()) }

// Override returns the override r was compiled from.
func (r *Rule) Override() Override {
	src := SourceAPI
	if r.policy {
		src = SourcePolicy
	}
	return Override{Name: r.Name(), Match: r.Match(), Params: r.c.params, TTL: r.ttl, Note: r.note, Source: src,
		CreatedAt: msTime(r.created), UpdatedAt: msTime(r.updated), ExpiresAt: msTime(r.expires)}
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// next splits the first value off an encoding (uvarint length, bytes).
func next(s string) (string, string) {
	n, w := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
	return s[w : w+int(n)], s[w+int(n):]
}

// group holds the rules of one limit whose matches name the same
// descriptors in the same modes.
type group struct {
	ix     *Index
	sig    string   // identity: each name with its mode, in byte order
	exact  []string // names matched exactly, in byte order
	prefix []string // names matched by prefix
	anyn   []string // names matched by "*"
	// p == 0: the rules by exact key (encode of the exact values); else
	// the tries of the first prefix name by exact key.
	rules map[string]*Rule
	tries map[string]*plevel
	n     int
}

// plevel is a trie of the values of one prefix name: to the next level,
// or to the rule at the last.
type plevel struct{ t radix }

type pval struct {
	r    *Rule
	next *plevel
}

// rawKey reports whether the exact key is the one exact value itself (the
// common group of one exact descriptor).
func (g *group) rawKey() bool { return len(g.exact) == 1 && len(g.prefix) == 0 }

// appendEncoded appends s as one value of an encoding.
func appendEncoded(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encode is the values of m in g's order: the exact key, then each
// prefix without its "*".
func (g *group) encode(m map[string]string) (vals string, keyLen int) {
	if g.rawKey() {
		v := m[g.exact[0]]
		return v, len(v)
	}
	var b []byte
	for _, n := range g.exact {
		b = appendEncoded(b, m[n])
	}
	keyLen = len(b)
	for _, n := range g.prefix {
		b = appendEncoded(b, strings.TrimSuffix(m[n], "*"))
	}
	return string(b), keyLen
}

// best returns g's winning live rule for desc at now (Unix ms) and the sum
// of its prefix lengths; nil when none matches.
func (g *group) best(desc map[string]string, now int64) (*Rule, int) {
	for _, n := range g.anyn {
		if _, ok := desc[n]; !ok {
			return nil, 0
		}
	}
	if g.rawKey() {
		v, ok := desc[g.exact[0]]
		if !ok {
			return nil, 0
		}
		if r := g.rules[v]; r != nil && r.alive(now) {
			return r, 0
		}
		return nil, 0
	}
	var buf [128]byte
	key := buf[:0]
	for _, n := range g.exact {
		v, ok := desc[n]
		if !ok {
			return nil, 0
		}
		key = appendEncoded(key, v)
	}
	if len(g.prefix) == 0 {
		if r := g.rules[string(key)]; r != nil && r.alive(now) {
			return r, 0
		}
		return nil, 0
	}
	lv := g.tries[string(key)]
	if lv == nil {
		return nil, 0
	}
	return g.bestPrefix(lv, 0, desc, now)
}

// bestPrefix returns the winning live rule under trie lv of prefix name i.
func (g *group) bestPrefix(lv *plevel, i int, desc map[string]string, now int64) (best *Rule, sum int) {
	v, ok := desc[g.prefix[i]]
	if !ok {
		return nil, 0
	}
	last := i == len(g.prefix)-1
	n, depth := &lv.t.root, 0
	for {
		if n.has {
			r, s := n.val.r, depth
			if last {
				if !r.alive(now) {
					r = nil
				}
			} else {
				var sub int
				r, sub = g.bestPrefix(n.val.next, i+1, desc, now)
				s += sub
			}
			// (At the last level the sums grow along the path: the
			// deepest live rule wins.)
			if r != nil && (best == nil || s > sum || s == sum && canonLess(r, best)) {
				best, sum = r, s
			}
		}
		rest := v[depth:]
		if rest == "" {
			return best, sum
		}
		j, ok := n.child(rest[0])
		if !ok || !strings.HasPrefix(rest, n.kids[j].label) {
			return best, sum
		}
		n = n.kids[j]
		depth += len(n.label)
	}
}

// canonLess reports whether a's canonical match is below b's (it
// allocates: only ties of the first three criteria come here).
func canonLess(a, b *Rule) bool { return a.CanonicalMatch() < b.CanonicalMatch() }

// lookup returns the rule stored for vals (nil: none).
func (g *group) lookup(vals string, keyLen int) *Rule {
	if len(g.prefix) == 0 {
		return g.rules[vals]
	}
	lv := g.tries[vals[:keyLen]]
	rest := vals[keyLen:]
	for i := range g.prefix {
		if lv == nil {
			return nil
		}
		var p string
		p, rest = next(rest)
		pv, ok := lv.t.get(p)
		if !ok {
			return nil
		}
		if i == len(g.prefix)-1 {
			return pv.r
		}
		lv = pv.next
	}
	return nil
}

// put stores r (its vals set), returning the rule it replaces.
func (g *group) put(r *Rule, keyLen int) *Rule {
	if len(g.prefix) == 0 {
		old := g.rules[r.vals]
		g.rules[r.vals] = r
		if old == nil {
			g.n++
		}
		return old
	}
	key := r.vals[:keyLen]
	lv := g.tries[key]
	if lv == nil {
		lv = &plevel{}
		g.tries[key] = lv
	}
	rest := r.vals[keyLen:]
	for i := range g.prefix {
		var p string
		p, rest = next(rest)
		pv, _ := lv.t.get(p)
		if i == len(g.prefix)-1 {
			old := pv.r
			lv.t.put(p, pval{r: r})
			if old == nil {
				g.n++
			}
			return old
		}
		if pv.next == nil {
			pv.next = &plevel{}
			lv.t.put(p, pv)
		}
		lv = pv.next
	}
	return nil
}

// del removes the rule stored for vals, returning it (nil: none).
func (g *group) del(vals string, keyLen int) *Rule {
	if len(g.prefix) == 0 {
		old := g.rules[vals]
		if old != nil {
			delete(g.rules, vals)
			g.n--
		}
		return old
	}
	key := vals[:keyLen]
	old := g.delLevel(g.tries[key], 0, vals[keyLen:])
	if old != nil {
		g.n--
		if g.tries[key].t.n == 0 {
			delete(g.tries, key)
		}
	}
	return old
}

func (g *group) delLevel(lv *plevel, i int, rest string) *Rule {
	if lv == nil {
		return nil
	}
	p, rest := next(rest)
	pv, ok := lv.t.get(p)
	if !ok {
		return nil
	}
	if i == len(g.prefix)-1 {
		lv.t.del(p)
		return pv.r
	}
	old := g.delLevel(pv.next, i+1, rest)
	if old != nil && pv.next.t.n == 0 {
		lv.t.del(p)
	}
	return old
}

// each calls f for every rule of g.
func (g *group) each(f func(r *Rule)) {
	for _, r := range g.rules {
		f(r)
	}
	var rec func(lv *plevel)
	rec = func(lv *plevel) {
		lv.t.each(func(_ string, pv pval) {
			if pv.r != nil {
				f(pv.r)
			} else if pv.next != nil {
				rec(pv.next)
			}
		})
	}
	for _, lv := range g.tries {
		rec(lv)
	}
}
