// The one path from a request to store items and keys: which limits apply,
// each one's key and cost, for Check, CheckMany and Pause.

package limiter

import (
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/store"
)

// scratch is a request's working space, reused across calls.
type scratch struct {
	items []store.Item
	which []int // policy index of each item
	ends  []int // end of each item's key in key
	user  []int // where each item's key shows the caller's part (after "name:" and a hash tag)
	key   []byte
	// odd: an override makes an item shadow or decides it without the
	// store (take's slow path); rules is then each item's such override
	// (nil: none), else empty
	rules []*overrides.Rule
	odd   bool
	ovTmp ovEntry // resolveEntry's answer when it keeps none
	// now is the check's clock reading, when clocked: the latency
	// sample's start, an override's Hit, and the store's time when it
	// takes one (timedTaker)
	now     time.Time
	clocked bool
	rng     uint64      // the latency sampler's state (sample)
	fast    fastScratch // the fast path's (limiter/fast.go)
}

func newScratch() *scratch {
	return &scratch{items: make([]store.Item, 0, 8), which: make([]int, 0, 8), ends: make([]int, 0, 8),
		user: make([]int, 0, 8), key: make([]byte, 0, 128), rng: rand.Uint64() | 1}
}

// sample reports whether this check is one of the one in 16 the latency
// histogram times: a xorshift generator of the scratch's own (no shared
// state, no runtime call; pseudo-random, so that no pattern of requests
// is timed more than others).
func (sc *scratch) sample() bool {
	x := sc.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	sc.rng = x
	return x&15 == 0
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
		if itemCost > c.status[i].Capacity && c.ix[i].Len() == 0 && req.Spec == nil { // (else overrides' or requestSpec's pass)
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
		if lim.FairShare != nil {
			c.share(&items[len(items)-1], &limits[len(limits)-1], lim, req) // (fairshare.go)
		}
	}
	sc.which, sc.ends, sc.user, sc.key, sc.odd = which, ends, user, key, false
	if len(sc.rules) > 0 {
		sc.rules = sc.rules[:0]
	}
	var moved []int // per item, where its key starts when it was rendered anew (-1: not)
	if req.Spec != nil {
		var err error
		if moved, err = c.requestSpec(req, sc, items, limits); err != nil {
			sc.key = sc.key[:0]
			return nil, err
		}
		key = sc.key
	} else if c.anyIx {
		for j, i := range which {
			if c.ix[i].Len() == 0 {
				continue
			}
			var err error
			if moved, err = c.overridesPass(req, sc, items, limits, j); err != nil {
				sc.key = sc.key[:0]
				return nil, err
			}
			key = sc.key
			break
		}
	}
	if len(items) == 0 && req.RefuseUnmatched && !c.p.AllowUnmatched {
		return nil, noLimitApplies(c.p, req.Descriptors)
	}
	if named < len(req.Costs) {
		return nil, unknownLimit(req.Costs, limits)
	}
	// The keys, now that the buffer has stopped growing.
	from := 0
	for j := range items {
		at, end := from, ends[j]
		if moved != nil && moved[j] >= 0 {
			at, end = moved[j], moved[j+len(items)]
		}
		if borrow {
			items[j].Key = unsafe.String(&key[at], end-at)
		} else {
			items[j].Key = string(key[at:end])
		}
		from = ends[j]
	}
	sc.items = items
	res.Allowed, res.Limits, res.Cost, res.Wait = true, limits, cost, 0
	return items, nil
}

// overridesPass applies the overrides of the limits planned (items, their
// statuses limits; sc as plan left it): for each item of a limit with
// overrides, the one Resolve finds for the request, if any, gives its spec
// (and base, store.Item.Base), status and cost check (applyRule), and is
// counted (Rule.Hit); when one makes an item shadow or skips the store,
// sc.odd is set and sc.rules holds each item's override (nil: none; the
// other overrides are only in the statuses). An item without
// one gets the cost check plan left to it. On a store that does not
// convert specs, an override's spec of another state tag has its key
// rendered anew at the end of sc.key: moved holds, per item, its start
// (-1: not moved) and, len(items) further, its end. The clock is read
// at most once per check (sc.now: the latency sample's reading when the
// check has one), and only for a limit with overrides. Items before first
// have none.
func (c *compiled) overridesPass(req *Request, sc *scratch, items []store.Item, limits []LimitStatus, first int) (moved []int, err error) {
	for j := first; j < len(items); j++ {
		i := sc.which[j]
		if c.ix[i].Len() == 0 {
			continue
		}
		st := &limits[j]
		e := c.cachedEntry(i, j, sc)
		if e == nil || e.expires != 0 {
			if !sc.clocked {
				sc.now, sc.clocked = time.Now(), true
			}
			e = c.resolveEntry(i, j, req, sc, e, sc.now)
		}
		rule := e.rule
		if rule == nil {
			if st.TokenCost > st.Capacity {
				if err := c.costError(i, st.TokenCost); err != nil {
					return nil, err
				}
			}
			continue
		}
		if !sc.clocked {
			sc.now, sc.clocked = time.Now(), true
		}
		rule.Hit(sc.now)
		applyOverridden(st, &e.st)
		if e.odd { // (else nothing but the status needs the rule)
			if len(sc.rules) == 0 {
				sc.noRules(len(items), j)
			}
			sc.rules[j], sc.odd = rule, true
		}
		if st.TokenCost > e.maxCost {
			return nil, &CostError{Limit: c.p.Limits[i].Name, Cost: st.TokenCost, Capacity: e.maxCost}
		}
		if e.spec == nil {
			continue
		}
		items[j].Spec, items[j].Base = e.spec, e.base
		if e.rekey {
			// (a store that keeps one spec per key: a key of the spec's own)
			if moved == nil {
				moved = make([]int, 2*len(items))
				for k := range items {
					moved[k] = -1
				}
			}
			at := len(sc.key)
			sc.key, sc.user[j] = c.appendKey(i, sc.key, keyPrefix(c.p.Limits[i].Name, e.spec), req.Descriptors)
			moved[j], moved[j+len(items)] = at, len(sc.key)
		}
	}
	return moved, nil
}

// noRules makes sc.rules n items without an override, but item j's,
// which the caller sets.
func (sc *scratch) noRules(n, j int) {
	if cap(sc.rules) < n {
		sc.rules = make([]*overrides.Rule, n)
		return
	}
	sc.rules = sc.rules[:n]
	for k := 0; k < n; k++ { // (one item or a few: no memclr)
		if k != j {
			sc.rules[k] = nil
		}
	}
}

// appendKey appends limit i's key for desc under prefix (its hash tag
// first, when it has one) to key, and returns it with where the caller's
// part starts (counted from the key's start). The limit applies.
func (c *compiled) appendKey(i int, key []byte, prefix string, desc map[string]string) ([]byte, int) {
	lim, from := c.p.Limits[i], len(key)
	userKey := len(prefix)
	if lim.HashTag != "" {
		key = lim.AppendHashTag(key, desc)
		userKey += len(key) - from
	}
	key, _ = lim.AppendKey(append(key, prefix...), desc)
	return key, userKey
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
