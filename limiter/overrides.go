// Overrides on the decision path: the Set a limiter applies (SetOverrides),
// each limit's Index, and what an override does to a limit's item.

package limiter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/store"
)

// WithOverrides applies the overrides of s on every decision, as
// SetOverrides(s).
func WithOverrides(s *overrides.Set) Option { return func(x *Limiter) { x.ovr = s } }

// SetOverrides makes every later decision apply the overrides of s (nil:
// none, every limit is the policy's). For each limit that applies to a
// request and has overrides (s.Index(name).Len() > 0), the override that
// Resolve finds for the request's descriptors, if any, decides instead of
// the policy's parameters and is counted (Rule.Hit):
//
//   - deny: the limit refuses the request (LimitStatus.Denied), whatever
//     its state; nothing is taken from any limit. A deny that is shadow
//     (the override's or the limit's) is a would-be refusal only
//     (ShadowRefused).
//   - unlimited: the limit admits the request without a store call; its
//     status shows the policy's capacity as remaining.
//   - parameters: the override's spec (Rule.Spec) decides the limit's
//     item, on the same key as the policy's, so that a key's state carries
//     over every change of its parameters (a store that converts specs,
//     store.SpecConverter, applies the SetLimit rule: no credit created,
//     tokens above a smaller capacity dropped, debt kept; on one that does
//     not, a spec with another state tag is kept under a key of its own).
//   - shadow: the limit counts as if enforced but never refuses.
//
// The status of an overridden limit names the override
// (LimitStatus.Override, "override": {"match": ...}), and its decision is
// counted in sluice_override_decisions_total{limit,result}. A limit without
// overrides costs one atomic load per decision. s must be compiled against
// the limiter's policy (overrides.Set.SetPolicy on every SetPolicy); the
// Index of a limit is looked up by name once per SetPolicy or SetOverrides.
func (l *Limiter) SetOverrides(s *overrides.Set) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ovr = s
	old := l.compiled.Load()
	c := *old
	l.withOverrides(&c)
	l.compiled.Store(&c)
}

// Overrides returns the Set applied (nil: none).
func (l *Limiter) Overrides() *overrides.Set {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ovr
}

// The values of sluice_override_decisions_total's result label: the
// decision's results (ResultAdmitted, ResultRejected,
// ResultShadowRejected), and ResultDenied for a deny override's refusal.
const ResultDenied = "denied"

var overrideResults = [...]string{byAdmitted: ResultAdmitted, byRejected: ResultRejected, byShadowRejected: ResultShadowRejected, byDenied: ResultDenied}

const (
	byDenied           = byShadowRejected + 1 // an override's result index past the decision's
	numOverrideResults = byDenied + 1
)

// withOverrides sets c's per-limit Indexes and counters from l.ovr (l.mu
// held).
func (l *Limiter) withOverrides(c *compiled) {
	c.ix = make([]*overrides.Index, len(c.p.Limits))
	c.ovCount = make([][numOverrideResults]prometheus.Counter, len(c.p.Limits))
	c.ovc = make([]*ovCache, len(c.p.Limits))
	c.converts = false
	if sc, ok := l.st.(store.SpecConverter); ok {
		c.converts = sc.ConvertsSpecs()
	}
	c.anyIx = l.ovr != nil && len(c.p.Limits) > 0
	for i, lim := range c.p.Limits {
		if l.ovr != nil {
			c.ix[i] = l.ovr.Index(lim.Name)
			c.ovc[i] = newOvCache(lim)
		}
		for r, res := range overrideResults {
			c.ovCount[i][r] = l.m.overrides.WithLabelValues(lim.Name, res)
		}
	}
}

// skipped reports whether the override of an item decides it without the
// store (deny or unlimited).
func skipped(r *overrides.Rule) bool { return r != nil && (r.Deny() || r.Unlimited()) }

// ruleAt is the override of item j (nil: none, or no overrides at all).
func ruleAt(rules []*overrides.Rule, j int) *overrides.Rule {
	if rules == nil {
		return nil
	}
	return rules[j]
}

// overridden applies rule r, found for limit i, to its status st (a copy
// of c.status[i]) and returns the item's spec and capacity, and whether
// it is in shadow mode.
func (c *compiled) overridden(i int, r *overrides.Rule, st *LimitStatus) (*store.Spec, int64, bool) {
	st.Override = r
	spec, capacity := c.specs[i], st.Capacity
	sp := r.Spec()
	if c.shadow[i] { // (WithShadow: the rule's spec without its penalty box)
		sp = r.ShadowSpec()
	}
	if sp != nil && sp != spec {
		spec, capacity = sp, sp.Capacity()
		sh := r.Limit().Shape()
		st.Capacity, st.RefillPerSecond, st.Window, st.Period = sh.Capacity, sh.Rate, sh.Span, sh.Period
	}
	shadow := c.shadow[i] || r.Shadow()
	st.Shadow = shadow
	st.Denied = r.Deny()
	st.BlockFor = spec.BlockFor
	if skipped(r) { // (deny and unlimited block nothing)
		st.BlockFor = 0
	}
	return spec, capacity, shadow
}

// applyOverridden sets in st the fields of from (a status overridden
// wrote) that overridden sets: st becomes what overridden would make of it
// for the same limit and rule. (TestCachedStatus checks them.)
func applyOverridden(st, from *LimitStatus) {
	st.Override = from.Override
	st.Capacity, st.RefillPerSecond, st.Window, st.Period = from.Capacity, from.RefillPerSecond, from.Window, from.Period
	st.Shadow, st.Denied, st.BlockFor = from.Shadow, from.Denied, from.BlockFor
}

// overrideCostError is costError for an item under an override: deny and
// unlimited admit any cost (refusing or admitting it whatever it is).
func (c *compiled) overrideCostError(i int, r *overrides.Rule, cost, capacity int64, shadow bool) error {
	if cost <= capacity || c.conc[i] || shadow || skipped(r) {
		return nil
	}
	return &CostError{Limit: c.p.Limits[i].Name, Cost: cost, Capacity: capacity}
}

// decideSkipped is the decision of an item its override decides without
// the store: deny refuses, unlimited admits with the capacity left. It
// takes nothing.
func decideSkipped(it *store.Item, r *overrides.Rule) {
	it.Cost, it.MaxWait = 0, 0
	it.Decision = sluice.Decision{Allowed: !r.Deny()}
	if !r.Deny() {
		it.Decision.Remaining = it.Spec.Capacity()
	}
}

// DeniedBy returns the name of the first limit of res that a deny
// override refused (LimitStatus.Denied, not shadow), or "" when none did:
// such a refusal is answered 403 denied, not as a rate limit (retrying is
// useless).
func (r *Result) DeniedBy() string {
	for i := range r.Limits {
		if st := &r.Limits[i]; st.Denied && !st.Shadow {
			return st.Name
		}
	}
	return ""
}
