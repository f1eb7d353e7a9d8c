// Set: the overrides in force on one instance, indexed per limit for
// Resolve, changed one at a time.
package overrides

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// Set is the overrides in force, compiled against a policy. Resolve (on an
// Index, or on the Set by name) is safe for concurrent use with itself and
// with every change; changes (Put, Delete, Apply, Sweep, SetPolicy) are
// serialized, each costing time in proportion to the override's size
// (not to the Set's), except SetPolicy, which recompiles everything.
//
// An API override that the current policy refuses (its limit removed, or
// of another kind now) is held inactive: it does not apply, is not
// listed, and comes back when a policy accepts it again. So is an API
// override whose key a policy override holds (the policy's wins).
type Set struct {
	mu       sync.Mutex // serializes changes
	p        *policy.Policy
	idx      atomic.Pointer[map[string]*Index]
	inactive map[Key]inactive
	exp      expHeap
	version  uint64 // the Store version Apply last applied
}

type inactive struct {
	o   Override
	err error
}

// Index is the overrides of one limit. Set.Index returns the same Index
// for a name for the Set's whole life (a limiter may keep it per policy
// limit), whatever the changes and policies.
type Index struct {
	name string
	n    atomic.Int64 // rules held
	// gen grows (under mu, held for writing) on every change of the
	// rules or the limit: Version
	gen atomic.Uint64
	mu  sync.RWMutex
	lim *policy.Limit // nil: the policy has no limit of this name
	// groups sorted by precedence: exact count down, prefix count down,
	// then sig
	groups []*group
	bySig  map[string]*group
	params map[Params]*compiled
}

// NewSet returns an empty Set for policy p.
func NewSet(p *policy.Policy) *Set {
	s := &Set{p: p, inactive: map[Key]inactive{}}
	m := map[string]*Index{}
	for _, l := range p.Limits {
		m[l.Name] = &Index{name: l.Name, lim: l, bySig: map[string]*group{}, params: map[Params]*compiled{}}
	}
	s.idx.Store(&m)
	return s
}

// Policy returns the policy the Set is compiled against.
func (s *Set) Policy() *policy.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// Index returns the Index of limit name (created empty when the Set has
// none: it stays empty while the policy has no such limit).
func (s *Set) Index(name string) *Index {
	if ix := (*s.idx.Load())[name]; ix != nil {
		return ix
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index(name)
}

// index is Index with s.mu held.
func (s *Set) index(name string) *Index {
	old := *s.idx.Load()
	if ix := old[name]; ix != nil {
		return ix
	}
	m := make(map[string]*Index, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	ix := &Index{name: name, lim: s.p.Limit(name), bySig: map[string]*group{}, params: map[Params]*compiled{}}
	m[name] = ix
	s.idx.Store(&m)
	return ix
}

// Resolve returns the override of limit name that applies to a request
// with these descriptors at now: the most specific live one (see the
// package documentation), or nil when none does (the policy's limit
// applies). It does not count the decision (Rule.Hit does).
func (s *Set) Resolve(name string, desc map[string]string, now time.Time) *Rule {
	return (*s.idx.Load())[name].Resolve(desc, now)
}

// Resolve returns the limit's override that applies to a request with
// these descriptors at now, as Set.Resolve. A nil Index has none. An
// override expires exactly at its ExpiresAt: from then on Resolve skips
// it, whether or not Sweep has removed it. The descriptors are read, not
// kept. Without overrides it costs one atomic load; a caller that reads
// the clock only for it tests Len first (0: Resolve is nil whatever the
// time).
func (ix *Index) Resolve(desc map[string]string, now time.Time) *Rule {
	if ix == nil || ix.n.Load() == 0 {
		return nil
	}
	ms := now.UnixMilli()
	ix.mu.RLock()
	r := ix.resolve(desc, ms)
	ix.mu.RUnlock()
	return r
}

// ResolveVersion is Resolve, with the Index's Version and policy limit
// (nil: the policy has none of its name) that the answer was found under,
// read together with it. A caller may keep the answer for these
// descriptors while Version returns the same number, up to the rule's
// ExpiresAt: within one version, the answer for given descriptors
// changes only when the rule it names expires (a rule that beats it is
// expired already, or it would be the answer).
func (ix *Index) ResolveVersion(desc map[string]string, now time.Time) (*Rule, uint64, *policy.Limit) {
	if ix == nil {
		return nil, 0, nil
	}
	ms := now.UnixMilli()
	ix.mu.RLock()
	r, v, lim := ix.resolve(desc, ms), ix.gen.Load(), ix.lim
	ix.mu.RUnlock()
	return r, v, lim
}

// Version returns a number that changes on every change of the Index
// (Put, Delete, Apply, Sweep and SetPolicy of its Set): one atomic load.
// Equal numbers mean the same rules under the same policy limit.
func (ix *Index) Version() uint64 { return ix.gen.Load() }

func (ix *Index) resolve(desc map[string]string, now int64) *Rule {
	gs := ix.groups
	for i := 0; i < len(gs); {
		var best *Rule
		sum := 0
		j := i
		for ; j < len(gs) && len(gs[j].exact) == len(gs[i].exact) && len(gs[j].prefix) == len(gs[i].prefix); j++ {
			r, s := gs[j].best(desc, now)
			if r != nil && (best == nil || s > sum || s == sum && canonLess(r, best)) {
				best, sum = r, s
			}
		}
		if best != nil {
			return best
		}
		i = j
	}
	return nil
}

// Len returns the number of overrides of the limit held (an expired one
// until Sweep removes it).
func (ix *Index) Len() int {
	if ix == nil {
		return 0
	}
	return int(ix.n.Load())
}

// Count returns the number of overrides of limit name held (Index.Len).
func (s *Set) Count(name string) int { return (*s.idx.Load())[name].Len() }

// Counts returns Count for every limit of the policy (for /v1/policy and
// the sluice_overrides gauge).
func (s *Set) Counts() map[string]int {
	out := map[string]int{}
	for name, ix := range *s.idx.Load() {
		if ix.lim != nil {
			out[name] = ix.Len()
		}
	}
	return out
}

// Put validates o against the Set's policy (Validate) and puts it in
// force, replacing the override of its (Name, Match); its times are kept
// as they are (Stamp sets them). The rule replaced, if any, hands its
// counters on. It refuses, changing nothing: Validate's errors, and an
// API override whose key a policy override holds (ErrPolicyOverride).
// An already expired override is accepted and skipped by Resolve.
func (s *Set) Put(o *Override) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(o)
}

func (s *Set) put(o *Override) error {
	if err := o.checkFields(); err != nil {
		return err
	}
	ix := s.index(o.Name)
	if ix.lim == nil {
		return errorf(ErrUnknownLimit, o.Name, "name", "the policy has no limit %q", o.Name)
	}
	if err := checkMatch(o.Match, ix.lim); err != nil {
		return err
	}
	c := ix.params[o.Params]
	if c == nil {
		var err *Error
		if c, err = compileParams(&o.Params, ix.lim); err != nil {
			return err
		}
	}
	sig, exact, prefix, anyn := signature(o.Match)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.gen.Add(1) // (before the unlock)
	g := ix.bySig[sig]
	if g == nil {
		g = &group{ix: ix, sig: sig, exact: exact, prefix: prefix, anyn: anyn, rules: map[string]*Rule{}, tries: map[string]*plevel{}}
	}
	vals, keyLen := g.encode(o.Match)
	old := g.lookup(vals, keyLen)
	isPolicy := o.Source == SourcePolicy
	if old != nil && old.policy && !isPolicy {
		return errorf(ErrPolicyOverride, o.Name, "match", "the policy file sets the override of %s: the API cannot change it", CanonicalMatch(o.Match))
	}
	if ix.bySig[sig] == nil {
		ix.bySig[sig] = g
		ix.groups = append(ix.groups, g)
		slices.SortFunc(ix.groups, func(a, b *group) int {
			return cmp.Or(-cmp.Compare(len(a.exact), len(b.exact)), -cmp.Compare(len(a.prefix), len(b.prefix)), strings.Compare(a.sig, b.sig))
		})
	}
	ix.params[o.Params] = c
	r := &Rule{g: g, vals: vals, c: c, note: o.Note, ttl: o.TTL, policy: isPolicy,
		created: unixMs(o.CreatedAt), updated: unixMs(o.UpdatedAt), expires: unixMs(o.ExpiresAt)}
	if old != nil {
		r.matched.Store(old.matched.Load())
		r.last.Store(old.last.Load())
	} else {
		ix.n.Add(1)
	}
	g.put(r, keyLen)
	if r.expires != 0 {
		heap.Push(&s.exp, expiry{r.expires, r})
	}
	if len(s.inactive) > 0 {
		delete(s.inactive, o.Key())
	}
	return nil
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// signature is the identity of m's group and its names by mode.
func signature(m map[string]string) (sig string, exact, prefix, anyn []string) {
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		md, _, _ := parseValue(m[k])
		b.WriteString(k)
		b.WriteByte("=*?"[md])
		b.WriteByte(0)
		switch md {
		case modeExact:
			exact = append(exact, k)
		case modePrefix:
			prefix = append(prefix, k)
		default:
			anyn = append(anyn, k)
		}
	}
	return b.String(), exact, prefix, anyn
}

// Get returns the rule of limit name with match m (expired or not), or
// nil.
func (s *Set) Get(name string, m map[string]string) *Rule {
	ix := (*s.idx.Load())[name]
	if ix == nil {
		return nil
	}
	sig, _, _, _ := signature(m)
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	g := ix.bySig[sig]
	if g == nil {
		return nil
	}
	vals, keyLen := g.encode(m)
	return g.lookup(vals, keyLen)
}

// Delete removes the API override of limit name with match m: nil, or an
// *Error matching ErrNotFound (none, or only an inactive one, which goes
// too) or ErrPolicyOverride (the policy file sets it; nothing changes).
func (s *Set) Delete(name string, m map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.del(name, m, false)
}

func (s *Set) del(name string, m map[string]string, policyToo bool) error {
	k := KeyOf(name, m)
	_, wasInactive := s.inactive[k]
	delete(s.inactive, k)
	notFound := errorf(ErrNotFound, name, "match", "no override of limit %q with match %s", name, k.Match)
	ix := (*s.idx.Load())[name]
	if ix == nil {
		return notFound
	}
	sig, _, _, _ := signature(m)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.gen.Add(1) // (before the unlock)
	g := ix.bySig[sig]
	if g == nil {
		if wasInactive {
			return nil
		}
		return notFound
	}
	vals, keyLen := g.encode(m)
	r := g.lookup(vals, keyLen)
	switch {
	case r == nil && wasInactive:
		return nil
	case r == nil:
		return notFound
	case r.policy && !policyToo:
		return errorf(ErrPolicyOverride, name, "match", "the policy file sets the override of %s: the API cannot delete it", k.Match)
	}
	g.del(vals, keyLen)
	ix.n.Add(-1)
	if g.n == 0 {
		delete(ix.bySig, sig)
		ix.groups = slices.DeleteFunc(ix.groups, func(x *group) bool { return x == g })
	}
	return nil
}

// Sweep removes the overrides expired at now (Resolve skips them
// already), and returns how many it removed.
func (s *Set) Sweep(now time.Time) int { return len(s.SweepExpired(now)) }

// SweepExpired is Sweep returning the overrides it removed (in force until
// they expired; the audit log records them).
func (s *Set) SweepExpired(now time.Time) []Override {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := now.UnixMilli()
	var gone []Override
	for len(s.exp) > 0 && s.exp[0].at <= ms {
		e := heap.Pop(&s.exp).(expiry)
		r := e.r
		if r.g.ix.current(r) {
			o := r.Override()
			if s.del(r.Name(), r.Match(), true) == nil {
				gone = append(gone, o)
			}
		}
	}
	for k, in := range s.inactive {
		if in.o.Expired(now) {
			delete(s.inactive, k)
		}
	}
	return gone
}

// current reports whether r is the rule ix holds for its match.
func (ix *Index) current(r *Rule) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.bySig[r.g.sig] == r.g && r.g.lookup(r.vals, r.g.keyLen(r.vals)) == r
}

// keyLen returns the length of the exact key at the start of vals.
func (g *group) keyLen(vals string) int {
	if g.rawKey() {
		return len(vals)
	}
	rest := vals
	for range g.exact {
		_, rest = next(rest)
	}
	return len(vals) - len(rest)
}

// expiry is a rule's expiry in the sweep heap (stale when the rule has
// been replaced or deleted since).
type expiry struct {
	at int64
	r  *Rule
}

type expHeap []expiry

func (h expHeap) Len() int           { return len(h) }
func (h expHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Inactive returns the API overrides held but not in force, each with the
// reason (Validate's error against the current policy, or
// ErrPolicyOverride), in key order.
func (s *Set) Inactive() []InactiveOverride {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []InactiveOverride
	for _, in := range s.inactive {
		out = append(out, InactiveOverride{in.o, in.err})
	}
	slices.SortFunc(out, func(a, b InactiveOverride) int {
		return cmp.Or(strings.Compare(a.Override.Name, b.Override.Name), strings.Compare(CanonicalMatch(a.Override.Match), CanonicalMatch(b.Override.Match)))
	})
	return out
}

// InactiveOverride is an override held but not in force, and why.
type InactiveOverride struct {
	Override Override
	Err      error
}
