// A request's own limit (Request.Spec): a per-request spec deciding the
// limits that apply to it, as Envoy's RateLimitDescriptor.limit.

package limiter

import "github.com/sluicehq/sluice/store"

// requestSpec applies req.Spec to the items plan made (their statuses
// limits; sc as plan left it), in-flight caps aside: each item takes the
// spec (and its limit's as base on a store that converts specs), its
// status the spec's capacity and rate, and a cost above the capacity of
// an enforced limit is a *CostError. On a store that does not convert, a
// spec of another state tag than the limit's has its key rendered anew at
// the end of sc.key: moved as overridesPass returns it.
func (c *compiled) requestSpec(req *Request, sc *scratch, items []store.Item, limits []LimitStatus) (moved []int, err error) {
	sp := req.Spec
	for j := range items {
		i := sc.which[j]
		if c.conc[i] {
			continue
		}
		st := &limits[j]
		st.Algorithm, st.Capacity, st.RefillPerSecond, st.Window, st.Period = sp.Kind.String(), sp.Capacity(), sp.Rate(), 0, ""
		st.BlockFor = sp.BlockFor
		if st.TokenCost > st.Capacity && !c.shadow[i] {
			return nil, &CostError{Limit: c.p.Limits[i].Name, Cost: st.TokenCost, Capacity: st.Capacity}
		}
		if sp == c.specs[i] {
			continue
		}
		items[j].Spec = sp
		if c.converts {
			items[j].Base = c.specs[i]
		} else if sp.StateTag() != c.specs[i].StateTag() {
			if moved == nil {
				moved = make([]int, 2*len(items))
				for k := range items {
					moved[k] = -1
				}
			}
			at := len(sc.key)
			sc.key, sc.user[j] = c.appendKey(i, sc.key, keyPrefix(c.p.Limits[i].Name, sp), req.Descriptors)
			moved[j], moved[j+len(items)] = at, len(sc.key)
		}
	}
	return moved, nil
}
