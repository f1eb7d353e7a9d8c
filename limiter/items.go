// The one path from a request to store items and keys: which limits apply,
// each one's key and cost, for Check, CheckMany and Pause.

package limiter

import (
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// scratch is a request's working space, reused across calls.
type scratch struct {
	items []store.Item
	which []int // policy index of each item
	ends  []int // end of each item's key in key
	user  []int // where each item's key shows the caller's part (after "name:" and a hash tag)
	key   []byte
}

func newScratch() *scratch {
	return &scratch{items: make([]store.Item, 0, 8), which: make([]int, 0, 8), ends: make([]int, 0, 8),
		user: make([]int, 0, 8), key: make([]byte, 0, 128)}
}

// plan turns req into the store items of the limits of c that apply to
// it, in policy order, and returns them (sc.items, replacing sc's): per
// item, its spec, cost and key; its policy index in sc.which, and where
// its key shows the caller's part in sc.user. The keys are rendered into
// sc.key and borrowed from it when borrow is true (the buffer must then
// outlive the items' use, and a store that keeps a key copies it:
// store.KeyBorrower), else copied. res becomes the admission of req before
// any decision: Allowed, each limit's status (res.Limits, its storage
// reused; TokenCost set), and the request's Cost.
//
// A limit's key is its hash tag (braced, when it has one), its name (and
// state tag, keyPrefix) and its rendered key template. A limit's cost is
// req.Cost, else the policy's for the descriptors, unless req.Costs names
// the limit; an in-flight cap's item costs one slot; a peek's items cost 0
// (their statuses show the cost a check would take). The errors (nothing
// to decide; res as it was, its statuses' storage perhaps written): a
// negative cost (sluice.ErrInvalidCost); a negative per-limit cost, or one
// for an in-flight cap (perLimitCost); a cost above an enforced limit's
// capacity (*CostError, costError); with req.RefuseUnmatched, no limit
// applying (*NoLimitError); a name of req.Costs that is no applicable
// limit (*UnknownLimitError).
//
// Check, CheckMany and Pause call it. It is Check's hot path: one loop,
// its slices in locals, its results written to sc and res.
func (c *compiled) plan(req *Request, sc *scratch, res *Result, borrow bool) ([]store.Item, error) {
	if req.Cost < 0 {
		return nil, sluice.Errorf(sluice.ErrInvalidCost, "cost %d is negative", req.Cost)
	}
	cost := req.Cost
	if cost == 0 {
		cost = c.p.Cost(req.Descriptors)
	}
	named := 0 // limits of req.Costs met
	items, which, ends, user, key := sc.items[:0], sc.which[:0], sc.ends[:0], sc.user[:0], sc.key[:0]
	limits := res.Limits[:0]
	for i, lim := range c.p.Limits {
		from := len(key)
		k, ok := lim.AppendKey(append(key, c.prefix[i]...), req.Descriptors)
		if !ok {
			key = k[:from]
			continue
		}
		userKey := len(c.prefix[i])
		if lim.HashTag != "" {
			k = lim.AppendHashTag(k[:from], req.Descriptors)
			userKey += len(k) - from
			k, _ = lim.AppendKey(append(k, c.prefix[i]...), req.Descriptors)
		}
		key = k
		itemCost := cost
		if req.Costs != nil {
			if v, ok := req.Costs[lim.Name]; ok {
				if err := perLimitCost(lim.Name, v, c.conc[i]); err != nil {
					sc.key = key[:0]
					return nil, err
				}
				itemCost, named = v, named+1
			}
		}
		shown := itemCost
		if c.conc[i] {
			itemCost, shown = 1, 1
		}
		if itemCost > c.status[i].Capacity {
			if err := c.costError(i, itemCost); err != nil {
				sc.key = key[:0]
				return nil, err
			}
		}
		if req.Peek {
			itemCost = 0
		}
		items = append(items, store.Item{Spec: c.specs[i], Cost: itemCost})
		which, ends, user = append(which, i), append(ends, len(key)), append(user, userKey)
		limits = append(limits, c.status[i])
		limits[len(limits)-1].TokenCost = shown
	}
	sc.which, sc.ends, sc.user, sc.key = which, ends, user, key
	if len(items) == 0 && req.RefuseUnmatched && !c.p.AllowUnmatched {
		return nil, noLimitApplies(c.p, req.Descriptors)
	}
	if named < len(req.Costs) {
		return nil, unknownLimit(req.Costs, limits)
	}
	// The keys, now that the buffer has stopped growing.
	from := 0
	for j := range items {
		if borrow {
			items[j].Key = unsafe.String(&key[from], ends[j]-from)
		} else {
			items[j].Key = string(key[from:ends[j]])
		}
		from = ends[j]
	}
	sc.items = items
	res.Allowed, res.Limits, res.Cost, res.Wait = true, limits, cost, 0
	return items, nil
}

// costError is the error of an item of limit i costing cost, nil when it
// may be decided: an enforced limit never admits a cost above its
// capacity. (An in-flight cap's item costs one slot, and a shadow limit's
// is peeked and reported refused: decideShadow.)
func (c *compiled) costError(i int, cost int64) error {
	if cost <= c.status[i].Capacity || c.conc[i] || c.shadow[i] {
		return nil
	}
	return &CostError{Limit: c.p.Limits[i].Name, Cost: cost, Capacity: c.status[i].Capacity}
}

// merged is the cost of an item of limit i that two requests share (of
// costs a and b): their sum, or one slot of an in-flight cap.
func (c *compiled) merged(i int, a, b int64) int64 {
	if c.conc[i] {
		return max(a, b)
	}
	return a + b
}
