// CheckMany: several requests in one store call, each all or nothing.

package limiter

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/store"
)

// byOverride is the ref of a request's limit its override decides (deny,
// unlimited): no store item.
const byOverride = math.MinInt

// ManyResult is the outcome of CheckMany.
type ManyResult struct {
	// Allowed is true when every request was admitted by all its limits;
	// when false, nothing was taken from any limit of any request.
	Allowed bool
	// RetryAfter is, when refused, the wait until every limit could admit.
	RetryAfter time.Duration
	// Slots holds the in-flight slots taken, if any.
	Slots store.Slots
	// Results has one result per request, in order: its own limits'
	// statuses, and Allowed when all of them could admit.
	Results []Result
	// Receipt, when a request asked for one (Request.Receipt) and the
	// call was admitted, records what every enforced limit of the call
	// took (a bucket several requests share: once, their summed cost), for
	// Settle and SettleCosts; items that took nothing and in-flight caps
	// are not in it.
	Receipt Receipt
}

// CheckMany decides several requests as one, all or nothing: either every
// applicable limit of every request takes its cost, or none takes
// anything. A bucket that several requests share takes the sum of their
// costs (an in-flight slot is taken once). It is the admission of Envoy's
// multi-descriptor requests. Errors are as for Check; MaxWait is ignored.
func (l *Limiter) CheckMany(ctx context.Context, reqs []Request) (ManyResult, error) {
	c := l.compiled.Load()
	// The enforced limits' items decide all or nothing; the shadow
	// limits' (c.shadow) are decided one by one afterwards (see take).
	var items, shadow []store.Item
	index, sindex := map[string]int{}, map[string]int{}
	out := ManyResult{Allowed: true, Results: make([]Result, len(reqs))}
	refs := make([][]int, len(reqs))  // per request, per limit: index in items, or -1-index in shadow
	which := make([][]int, len(reqs)) // per request, per limit: its policy index
	denied := false                   // a deny override that is not shadow applies
	var owner []int                   // per item, its limit's policy index (for a receipt)
	receipt := false                  // a request asks for one
	for r := range reqs {
		receipt = receipt || reqs[r].Receipt
	}
	sc := l.bufs.Get().(*scratch)
	defer l.bufs.Put(sc)
	sc.clocked = false // (one reading, when overrides need one, for every request: decided at once)
	for r, req := range reqs {
		res := &out.Results[r]
		mine, err := c.plan(&req, sc, res, false) // (keys copied: they outlive the scratch)
		if err != nil {
			return ManyResult{}, err
		}
		which[r] = append([]int(nil), sc.which...)
		for k, it := range mine {
			i := sc.which[k]
			res.Limits[k].Key = it.Key[sc.user[k]:]
			if rule := res.Limits[k].Override; skipped(rule) {
				// (decided by its override: no store item)
				denied = denied || rule.Deny() && !res.Limits[k].Shadow
				refs[r] = append(refs[r], byOverride)
				continue
			}
			its, idx := &items, index
			if res.Limits[k].Shadow {
				its, idx = &shadow, sindex
			}
			j, seen := idx[it.Key]
			if seen {
				(*its)[j].Cost = c.merged(i, (*its)[j].Cost, it.Cost)
			} else {
				j = len(*its)
				idx[it.Key] = j
				*its = append(*its, it)
				if receipt && !res.Limits[k].Shadow {
					owner = append(owner, i)
				}
			}
			err := c.costError(i, (*its)[j].Cost)
			if rule := res.Limits[k].Override; rule != nil {
				err = c.overrideCostError(i, rule, (*its)[j].Cost, it.Spec.Capacity(), res.Limits[k].Shadow)
			} else if req.Spec != nil && !c.conc[i] { // (the request's own spec's capacity)
				err = c.overrideCostError(i, nil, (*its)[j].Cost, it.Spec.Capacity(), res.Limits[k].Shadow)
			}
			if err != nil {
				return ManyResult{}, err
			}
			if res.Limits[k].Shadow {
				j = -1 - j
			}
			refs[r] = append(refs[r], j)
		}
	}
	if c.classified(reqs) { // (one class for the call: its reserve on every item)
		cls, err := c.callClass(reqs)
		if err != nil {
			return ManyResult{}, err
		}
		if err := c.setClass(cls, &out, items, shadow, refs, which); err != nil {
			return ManyResult{}, err
		}
	}
	if denied { // (a deny refuses every request: the others take nothing)
		for j := range items {
			items[j].Cost = 0
		}
	}
	if len(items) > 0 {
		res, err := l.st.Take(ctx, items)
		if err != nil {
			l.m.errors.Inc()
			return ManyResult{}, fmt.Errorf("limiter: %w", err)
		}
		out.Allowed, out.Slots = res.Allowed, res.Slots
	}
	out.Allowed = out.Allowed && !denied
	if receipt && out.Allowed {
		out.Receipt = manyReceipt(c, items, owner)
	}
	for j := range shadow { // (names: the key's limit prefix, for the log)
		l.decideShadow(shadow[j:j+1], shadow[j].Key, !out.Allowed, func(its []store.Item) (store.Result, error) { return l.st.Take(ctx, its) })
	}
	for r := range out.Results {
		res := &out.Results[r]
		res.Allowed = res.Allowed && !denied
		for k, j := range refs[r] {
			st := &res.Limits[k]
			if j == byOverride {
				it := store.Item{Spec: c.specs[which[r][k]]}
				decideSkipped(&it, st.Override)
				d := it.Decision
				st.Allowed, st.TokensRemaining, st.RetryAfter, st.ResetAfter = d.Allowed, d.Remaining, 0, 0
				if st.Shadow {
					shadowVerdict(st, it, reqs[r].Peek)
				}
				continue
			}
			if j < 0 {
				it := shadow[-1-j]
				d := it.Decision
				st.Allowed, st.TokensRemaining, st.RetryAfter, st.ResetAfter = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter
				shadowVerdict(st, it, reqs[r].Peek)
				continue
			}
			d := items[j].Decision
			st.Allowed, st.TokensRemaining, st.RetryAfter, st.ResetAfter = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter
			res.Allowed = res.Allowed && d.Allowed
			res.RetryAfter = max(res.RetryAfter, d.RetryAfter)
			out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
		}
		l.observe(ctx, c, which[r], res, &reqs[r], time.Time{}, false)
	}
	return out, nil
}

// manyReceipt is the receipt of CheckMany's admitted items (owner: each
// item's limit's policy index).
func manyReceipt(c *compiled, items []store.Item, owner []int) Receipt {
	var r Receipt
	for j := range items {
		if it := &items[j]; !it.Spec.HoldsSlots() && it.Cost > 0 {
			r.taken = append(r.taken, store.Adjustment{Key: it.Key, Spec: it.Spec, Base: it.Base, Delta: it.Cost, RefundBefore: it.RefundBefore})
			r.limits = append(r.limits, c.p.Limits[owner[j]].Name)
		}
	}
	if len(r.taken) > 0 {
		r.settled = new(atomic.Bool)
	}
	return r
}
