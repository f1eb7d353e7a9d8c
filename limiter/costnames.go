// The errors of a check's per-limit costs: a cost a limit cannot take, a
// name no applicable limit has.

package limiter

import (
	"slices"

	"github.com/sluicehq/sluice"
)

// perLimitCost checks a cost of Request.Costs for limit name (conc: an
// in-flight cap).
func perLimitCost(name string, v int64, conc bool) error {
	switch {
	case v < 0:
		return sluice.Errorf(sluice.ErrInvalidCost, "cost %d for limit %q is negative", v, name)
	case conc:
		return sluice.Errorf(sluice.ErrInvalidCost, "limit %q is an in-flight cap (max_in_flight): a request holds one slot of it, whatever its cost", name)
	}
	return nil
}

// unknownLimit is the error for the first name (in sorted order) of costs
// that is not among the applicable limits.
func unknownLimit(costs map[string]int64, applicable []LimitStatus) error {
	names := make([]string, len(applicable))
	for i, st := range applicable {
		names[i] = st.Name
	}
	var unknown []string
	for n := range costs {
		if !slices.Contains(names, n) {
			unknown = append(unknown, n)
		}
	}
	slices.Sort(unknown)
	return &UnknownLimitError{Name: unknown[0], Applicable: names}
}
