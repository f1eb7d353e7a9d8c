// CheckMany: several requests in one store call, each all or nothing.

package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// ManyResult is the outcome of CheckMany.
type ManyResult struct {
	// Allowed is true when every request was admitted by all its limits;
	// when false, nothing was taken from any limit of any request.
	Allowed bool
	// RetryAfter is, when refused, the wait until every limit could admit.
	RetryAfter time.Duration
	// Lease holds the in-flight slots taken, if any.
	Lease store.Lease
	// Results has one result per request, in order: its own limits'
	// statuses, and Allowed when all of them could admit.
	Results []Result
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
	refs := make([][]int, len(reqs)) // per request, per limit: index in items, or -1-index in shadow
	for r, req := range reqs {
		if req.Cost < 0 {
			return ManyResult{}, sluice.Errorf(sluice.ErrInvalidCost, "cost %d is negative", req.Cost)
		}
		cost := req.Cost
		if cost == 0 {
			cost = c.p.Cost(req.Descriptors)
		}
		out.Results[r] = Result{Allowed: true, Cost: cost}
		named := 0
		for i, lim := range c.p.Limits {
			key, ok := lim.Match(req.Descriptors)
			if !ok {
				continue
			}
			itemCost := cost
			if v, ok := req.Costs[lim.Name]; ok {
				if err := perLimitCost(lim.Name, v, lim.Kind == policy.Concurrency); err != nil {
					return ManyResult{}, err
				}
				itemCost, named = v, named+1
			}
			if lim.Kind == policy.Concurrency {
				itemCost = 1
			}
			if req.Peek {
				itemCost = 0
			}
			full := c.prefix[i] + key
			if lim.HashTag != "" {
				full = string(lim.AppendHashTag(nil, req.Descriptors)) + full
			}
			its, idx := &items, index
			if c.shadow[i] {
				its, idx = &shadow, sindex
			}
			j, seen := idx[full]
			switch {
			case !seen:
				j = len(*its)
				idx[full] = j
				*its = append(*its, store.Item{Key: full, Spec: c.specs[i], Cost: itemCost})
			case lim.Kind == policy.Concurrency:
				(*its)[j].Cost = max((*its)[j].Cost, itemCost)
			default:
				(*its)[j].Cost += itemCost
			}
			if lim.Kind != policy.Concurrency && (*its)[j].Cost > lim.Capacity() && !c.shadow[i] {
				return ManyResult{}, &CostError{Limit: lim.Name, Cost: items[j].Cost, Capacity: lim.Capacity()}
			}
			if c.shadow[i] {
				j = -1 - j
			}
			refs[r] = append(refs[r], j)
			st := c.status[i]
			st.Key, st.TokenCost = key, itemCost
			out.Results[r].Limits = append(out.Results[r].Limits, st)
		}
		if named < len(req.Costs) {
			return ManyResult{}, unknownLimit(req.Costs, out.Results[r].Limits)
		}
	}
	if len(items) > 0 {
		res, err := l.st.Take(ctx, items)
		if err != nil {
			l.m.errors.Inc()
			return ManyResult{}, fmt.Errorf("limiter: %w", err)
		}
		out.Allowed, out.Lease = res.Allowed, res.Lease
	}
	for j := range shadow { // (names: the key's limit prefix, for the log)
		l.decideShadow(shadow[j:j+1], shadow[j].Key, !out.Allowed, func(its []store.Item) (store.Result, error) { return l.st.Take(ctx, its) })
	}
	for r := range out.Results {
		res := &out.Results[r]
		which := make([]int, 0, len(refs[r]))
		for k, j := range refs[r] {
			st := &res.Limits[k]
			if j < 0 {
				it := shadow[-1-j]
				d := it.Decision
				st.Allowed, st.TokensRemaining, st.RetryAfter, st.ResetAfter = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter
				shadowVerdict(st, it, reqs[r].Peek)
				which = append(which, c.index(st.Name))
				continue
			}
			d := items[j].Decision
			st.Allowed, st.TokensRemaining, st.RetryAfter, st.ResetAfter = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter
			res.Allowed = res.Allowed && d.Allowed
			res.RetryAfter = max(res.RetryAfter, d.RetryAfter)
			out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
			which = append(which, c.index(st.Name))
		}
		l.observe(c, which, res, reqs[r], time.Time{}, false)
	}
	return out, nil
}
