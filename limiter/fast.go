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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// heldTaker decides a request of plain token buckets on keys it holds
// (memstore.Store.TakePlainHeldAt): exactly as store.KeyBorrower's
// TakeBorrowed (at a reading of ours when at is not nil), or not at all
// (false: nothing changed). The fast plan makes only items of the shape
// it decides (fastSpec, within the capacity; no Base, MaxWait or Reserve).
type heldTaker interface {
	TakePlainHeldAt(items []store.Item, at *time.Time) (allowed, ok bool)
}

// fastPlan is a policy compiled for the fast path: each limit's key
// renderer, spec and capacity. A policy has one only when every limit is
// a plain token bucket (fastSpec), enforced (no shadow), without a hash
// tag, adaptive ceiling or priority classes, at most maxFast limits.
type fastPlan struct {
	limits []fastLimit
	costs  bool // the policy has cost rules (else a request's cost is 1)
}

// maxFast is the most limits a fast plan holds (memstore's TakePlainHeldAt
// decides at most 8 items).
const maxFast = 8

// fastLimit is one limit's renderer — its when as pairs, its key's prefix
// (name and state tag, keyPrefix) with the template's leading literal
// (head), and the template's other parts — with its spec, the fields of
// its status (the others are zero: newFastPlan checks it) and counters.
type fastLimit struct {
	i         int
	when      []fastPair
	prefix    string // keyPrefix: the status's key starts after it
	head      string // prefix and the template's leading literal
	parts     []fastPart
	one       string // the one placeholder after head, when the limit has no when and nothing else
	fixed     bool   // the key is head: no when, no placeholder
	spec      *store.Spec
	name      string
	algorithm string
	capacity  int64
	rate      float64
	counters  *[3][2]prometheus.Counter // c.counters[i]
	near      prometheus.Counter
	nearBelow float64 // NearLimitShare * capacity: a Remaining below it is near the limit
}

type fastPair struct{ k, v string }

// fastPart is a literal (name empty) or a descriptor's escaped value.
type fastPart struct{ lit, name string }

// fastEsc escapes a descriptor's value as policy keys do ('%', ':' and the
// braces; newFastPlan checks it renders as Limit.AppendKey).
var fastEsc = keyesc.NewSet(keyesc.PolicyKey)

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
		st := c.status[i]
		if st != (LimitStatus{Name: st.Name, Algorithm: st.Algorithm, Capacity: st.Capacity, RefillPerSecond: st.RefillPerSecond}) {
			return nil
		}
		fl := fastLimit{i: i, prefix: c.prefix[i], head: c.prefix[i], spec: sp, name: st.Name, algorithm: st.Algorithm,
			capacity: st.Capacity, rate: st.RefillPerSecond, counters: &c.counters[i], near: c.near[i],
			nearBelow: NearLimitShare * float64(st.Capacity)}
		for k, v := range lim.When {
			fl.when = append(fl.when, fastPair{k, v})
		}
		slices.SortFunc(fl.when, func(a, b fastPair) int { return strings.Compare(a.k, b.k) })
		var ok bool
		if fl.parts, ok = fastParts(lim.Key); !ok {
			return nil
		}
		if len(fl.parts) > 0 && fl.parts[0].name == "" {
			fl.head += fl.parts[0].lit
			fl.parts = fl.parts[1:]
		}
		if len(fl.parts) == 1 && fl.parts[0].name != "" && len(fl.when) == 0 {
			fl.one = fl.parts[0].name
		}
		fl.fixed = len(fl.parts) == 0 && len(fl.when) == 0
		if !fl.rendersAs(lim) {
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
	return sp.Kind.Direct() && *sp == store.Spec{Kind: store.TokenBucket, Bucket: sp.Bucket, OnStoreError: sp.OnStoreError}
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
	if f.one != "" { // ("name:{x}": one lookup)
		v, ok := desc[f.one]
		if !ok {
			return key, false
		}
		if key = append(key, f.head...); fastPlain(v) {
			return append(key, v...), true
		}
		return fastEsc.Append(key, v), true
	}
	for _, w := range f.when {
		if v, ok := desc[w.k]; !ok || v != w.v {
			return key, false
		}
	}
	from := len(key)
	key = append(key, f.head...)
	for _, p := range f.parts {
		if p.name == "" {
			key = append(key, p.lit...)
			continue
		}
		v, ok := desc[p.name]
		if !ok {
			return key[:from], false
		}
		if fastPlain(v) {
			key = append(key, v...)
		} else {
			key = fastEsc.Append(key, v)
		}
	}
	return key, true
}

// fastScratch is the fast path's working space in a check's scratch: its
// items (only Key, Spec and Cost are written here, the store writes
// Decision and Wait; the other fields stay zero) and each one's limit (in
// the plan of the check that wrote it).
type fastScratch struct {
	items [maxFast]store.Item
	lim   [maxFast]*fastLimit
}

// fast decides req on the fast plan when it can (limiter/fast.go: writing
// every field of *res but its scratch), else reports false.
func (l *Limiter) fast(ctx context.Context, req *Request, res *Result, sc *scratch) bool {
	c := l.compiled.Load()
	return c.fast != nil && !c.anyIx && fastRequest(req) && l.checkFast(ctx, c, req, res, sc)
}

// checkFast decides req on c's fast plan, as check would (the same
// result, statuses, metrics and logs), writing every field of *res, and
// reports whether it did: false, having changed nothing (*res included),
// when the request needs the general path (a cost above a capacity, no
// limit applying, a key the store does not hold).
func (l *Limiter) checkFast(ctx context.Context, c *compiled, req *Request, res *Result, sc *scratch) bool {
	f := c.fast
	timed := sc.sample() // the latency histogram samples one check in 16
	if timed {
		sc.now = time.Now()
	}
	desc := req.Descriptors
	cost := req.Cost
	if cost == 0 {
		cost = 1
		if f.costs {
			cost = c.p.Cost(desc)
		}
	}
	fs := &sc.fast
	n, key := 0, sc.key[:0]
	for k := range f.limits {
		fl := &f.limits[k]
		from := len(key)
		if fl.one != "" { // (appendKey's first case, and below a fixed key: written out, a call fewer)
			v, ok := desc[fl.one]
			if !ok {
				continue
			}
			if key = append(key, fl.head...); fastPlain(v) {
				key = append(key, v...)
			} else {
				key = fastEsc.Append(key, v)
			}
		} else if fl.fixed {
			key = append(key, fl.head...)
		} else {
			var ok bool
			if key, ok = fl.appendKey(key, desc); !ok {
				continue
			}
		}
		if cost > fl.capacity {
			sc.key = key[:0]
			return false // (a *CostError)
		}
		// The key aliases the buffer as it is now: a later append that
		// moves the buffer copies it and leaves these bytes as they are.
		it := &fs.items[n]
		it.Key, it.Spec, it.Cost = unsafe.String(&key[from], len(key)-from), fl.spec, cost
		fs.lim[n] = fl
		n++
	}
	sc.key = key
	if n == 0 {
		return false
	}
	items := fs.items[:n]
	var now *time.Time
	if timed {
		now = &sc.now
	}
	allowed, ok := l.ht.TakePlainHeldAt(items, now)
	if !ok {
		return false
	}
	limits := res.Limits[:0]
	if cap(limits) < n {
		limits = make([]LimitStatus, 0, n)
	}
	limits = limits[:n]
	attempt := byOriginal
	if req.Retry {
		attempt = byRetry
	}
	var retry time.Duration
	for j := range items {
		fl, d := fs.lim[j], &items[j].Decision
		fl.writeStatus(&limits[j], items[j].Key[len(fl.prefix):], cost, d)
		retry = max(retry, d.RetryAfter)
		// observe's counters
		if d.Allowed {
			fl.counters[byAdmitted][attempt].Inc()
			if allowed && float64(d.Remaining) < fl.nearBelow {
				fl.near.Inc()
			}
		} else {
			fl.counters[byRejected][attempt].Inc()
		}
	}
	// Every field of *res but its scratch (TestFastResultFields fails
	// when Result gains a field this does not write).
	res.Allowed, res.RetryAfter, res.Limits, res.Cost, res.Wait = allowed, retry, limits, cost, 0
	res.Priority, res.class = "", 0
	if res.Slots.ID != "" || res.Slots.Keys != nil { // (zero after any check of such a policy: tested, not written)
		res.Slots = store.Slots{}
	}
	if res.Receipt.taken != nil || res.Receipt.limits != nil || res.Receipt.settled != nil {
		res.Receipt = Receipt{}
	}
	if timed {
		l.m.latency.Observe(time.Since(sc.now).Seconds())
	}
	if l.keys != nil || !allowed && l.log != nil {
		l.observeFast(ctx, c, sc, res, req)
	}
	return true
}

// writeStatus writes the limit's status after decision d into *st: every
// field, each one as the general path leaves it for such a limit (a
// struct literal would be built aside and copied; TestFastStatusFields
// fails when LimitStatus gains a field this does not write).
func (f *fastLimit) writeStatus(st *LimitStatus, key string, cost int64, d *sluice.Decision) {
	st.Name, st.Key, st.Algorithm, st.Capacity, st.RefillPerSecond = f.name, key, f.algorithm, f.capacity, f.rate
	st.AdaptiveRefill, st.TokensRemaining, st.TokenCost, st.Allowed = 0, d.Remaining, cost, d.Allowed
	st.Shadow, st.ShadowRefused, st.Denied, st.NearLimit, st.Priority, st.FairShare = false, false, false, false, "", ShareStatus{}
	st.RetryAfter, st.BlockFor, st.ResetAfter, st.Period, st.Window, st.Override = d.RetryAfter, 0, d.ResetAfter, "", 0, nil
}

// observeFast is the rest of observe for a check of the fast path (its
// counters are counted by checkFast): the refusals logged and the keys
// observed, in the same order.
func (l *Limiter) observeFast(ctx context.Context, c *compiled, sc *scratch, res *Result, req *Request) {
	lim := &sc.fast.lim
	for j := range res.Limits {
		st, fl := &res.Limits[j], lim[j]
		if !st.Allowed && l.log != nil {
			l.logRefusal(ctx, c, fl.i, st, req)
		}
		if l.keys != nil {
			key := st.Key
			if len(c.p.Redact) > 0 {
				key, _ = c.p.DisplayKey(c.p.Limits[fl.i], req.Descriptors)
			}
			admitted := int64(0)
			if res.Allowed {
				admitted = st.TokenCost
			}
			l.keys.ObserveKey(st.Name, key, admitted, !st.Allowed, false)
		}
	}
}
