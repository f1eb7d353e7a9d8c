// The fast path of Check: a policy of plain token buckets over a store that
// decides keys it holds without the general layers (heldTaker), each
// limit's key rendered by a renderer compiled once per policy.

package limiter

import (
	"context"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// heldTaker decides a request of plain token buckets on keys it holds
// (memstore.Store.TakeHeldAt): exactly as store.KeyBorrower's
// TakeBorrowed (at a reading of ours when at is not nil), or not at all
// (false: nothing changed).
type heldTaker interface {
	TakeHeldAt(items []store.Item, at *time.Time) (store.Result, bool)
}

// fastPlan is a policy compiled for the fast path: each limit's key
// renderer, spec and capacity. A policy has one only when every limit is
// a plain token bucket (fastSpec), enforced (no shadow), without a hash
// tag, adaptive ceiling or priority classes, at most maxFast limits.
type fastPlan struct {
	limits []fastLimit
	costs  bool // the policy has cost rules (else a request's cost is 1)
}

// maxFast is the most limits a fast plan holds (memstore's TakeHeldAt
// decides at most 8 items).
const maxFast = 8

// fastLimit is one limit's renderer: its when as pairs, its key's prefix
// (name and state tag, keyPrefix) and its template's parts.
type fastLimit struct {
	i        int
	when     []fastPair
	prefix   string
	parts    []fastPart
	spec     *store.Spec
	capacity int64
}

type fastPair struct{ k, v string }

// fastPart is a literal (name empty) or a descriptor's escaped value.
type fastPart struct{ lit, name string }

// fastEsc escapes a descriptor's value as policy keys do ('%', ':' and the
// braces; newFastPlan checks it renders as Limit.AppendKey).
var fastEsc = keyesc.NewSet(":{}")

// fastRequest reports whether req is one the fast path decides: no
// per-limit costs, peek, wait, receipt, own spec or priority class.
func fastRequest(req *Request) bool {
	return req.Costs == nil && !req.Peek && req.MaxWait <= 0 && !req.Reserve && !req.Receipt &&
		req.Spec == nil && req.Priority == "" && req.Cost >= 0
}

// newFastPlan compiles c's fast plan; nil when c's policy or the store
// does not qualify (the general path decides every check then).
func (l *Limiter) newFastPlan(c *compiled) *fastPlan {
	if l.ht == nil || c.adapt != nil || c.anyShadow || c.p.DefaultPriority != "" || len(c.p.Limits) > maxFast {
		return nil
	}
	f := &fastPlan{costs: len(c.p.Costs) > 0}
	for i, lim := range c.p.Limits {
		sp := c.specs[i]
		if !fastSpec(sp) || c.shadow[i] || c.conc[i] || lim.HashTag != "" || lim.Adaptive != nil || sp.Capacity() != c.status[i].Capacity {
			return nil
		}
		fl := fastLimit{i: i, prefix: c.prefix[i], spec: sp, capacity: c.status[i].Capacity}
		for k, v := range lim.When {
			fl.when = append(fl.when, fastPair{k, v})
		}
		slices.SortFunc(fl.when, func(a, b fastPair) int { return strings.Compare(a.k, b.k) })
		var ok bool
		if fl.parts, ok = fastParts(lim.Key); !ok || !fl.rendersAs(lim) {
			return nil
		}
		f.limits = append(f.limits, fl)
	}
	return f
}

// fastSpec reports whether sp is a plain token bucket: its kind's
// parameters and on_store_error, nothing else (no penalty box, fair
// share or any field a later feature adds: such a spec differs from the
// one rebuilt here).
func fastSpec(sp *store.Spec) bool {
	return sp.Kind == store.TokenBucket && *sp == store.Spec{Kind: store.TokenBucket, Bucket: sp.Bucket, OnStoreError: sp.OnStoreError}
}

// fastParts splits a key template (policy-validated) into literals and
// placeholders.
func fastParts(t string) ([]fastPart, bool) {
	var parts []fastPart
	for t != "" {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			parts = append(parts, fastPart{lit: t})
			break
		}
		if i > 0 {
			parts = append(parts, fastPart{lit: t[:i]})
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 2 {
			return nil, false
		}
		parts = append(parts, fastPart{name: t[i+1 : i+j]})
		t = t[i+j+1:]
	}
	return parts, true
}

// rendersAs reports whether f renders lim's keys as lim.AppendKey does,
// on descriptors that need escaping and on ones missing a placeholder or
// failing the when (a check made once per policy).
func (f *fastLimit) rendersAs(lim *policy.Limit) bool {
	desc := map[string]string{}
	for k, v := range lim.When {
		desc[k] = v
	}
	for n, name := range lim.Placeholders() {
		desc[name] = "v" + string(rune('a'+n%26)) + ":%{}/é"
	}
	for _, drop := range append([]string{""}, lim.Placeholders()...) {
		d := desc
		if drop != "" {
			d = map[string]string{}
			for k, v := range desc {
				if k != drop {
					d[k] = v
				}
			}
		}
		want, wok := lim.AppendKey([]byte(f.prefix), d)
		got, gok := f.appendKey([]byte(nil), d)
		if wok != gok || wok && string(want) != string(got) {
			return false
		}
	}
	return true
}

// appendKey appends the limit's store key for desc (prefix, then the
// template with escaped values) to key; false, and key unchanged in
// length, when the limit does not apply.
func (f *fastLimit) appendKey(key []byte, desc map[string]string) ([]byte, bool) {
	for _, w := range f.when {
		if v, ok := desc[w.k]; !ok || v != w.v {
			return key, false
		}
	}
	from := len(key)
	key = append(key, f.prefix...)
	for _, p := range f.parts {
		if p.name == "" {
			key = append(key, p.lit...)
			continue
		}
		v, ok := desc[p.name]
		if !ok {
			return key[:from], false
		}
		key = fastEsc.Append(key, v)
	}
	return key, true
}

// checkFast decides req on c's fast plan f, as check would (the same
// result, statuses, metrics and logs), and reports whether it did: false,
// having changed nothing, when the request needs the general path (a cost
// above a capacity, no limit applying, a key the store does not hold).
func (l *Limiter) checkFast(ctx context.Context, c *compiled, f *fastPlan, req *Request, res *Result, sc *scratch, start time.Time, timed bool) bool {
	desc := req.Descriptors
	cost := req.Cost
	if cost == 0 {
		cost = 1
		if f.costs {
			cost = c.p.Cost(desc)
		}
	}
	items, which, ends, key := sc.items[:0], sc.which[:0], sc.ends[:0], sc.key[:0]
	for k := range f.limits {
		fl := &f.limits[k]
		var ok bool
		if key, ok = fl.appendKey(key, desc); !ok {
			continue
		}
		if cost > fl.capacity {
			sc.key = key[:0]
			return false // (a *CostError)
		}
		items = append(items, store.Item{Spec: fl.spec, Cost: cost})
		which, ends = append(which, fl.i), append(ends, len(key))
	}
	sc.key = key
	if len(items) == 0 {
		return false
	}
	from := 0
	for j := range items {
		items[j].Key = unsafe.String(&key[from], ends[j]-from)
		from = ends[j]
	}
	sc.items, sc.which, sc.ends = items, which, ends
	var now *time.Time
	if timed {
		now = &sc.now
	}
	r, ok := l.ht.TakeHeldAt(items, now)
	if !ok {
		return false
	}
	limits := res.Limits[:0]
	res.RetryAfter = 0
	for j := range items {
		limits = append(limits, c.status[which[j]])
		st, d := &limits[j], &items[j].Decision
		st.TokenCost = cost
		st.Key = items[j].Key[len(c.prefix[which[j]]):]
		st.Allowed, st.TokensRemaining, st.RetryAfter, st.ResetAfter = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter
		res.RetryAfter = max(res.RetryAfter, d.RetryAfter)
	}
	res.Allowed, res.Limits, res.Cost, res.Wait = r.Allowed, limits, cost, 0
	l.observe(ctx, c, which, res, req, start, timed)
	return true
}
