// Feedback: an outcome of a call (overloaded or ok) told to the adaptive
// limits that apply to its descriptors.

package limiter

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice/store"
)

// FeedbackStatus is one adaptive limit's answer to Feedback.
type FeedbackStatus struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	// Lowered is true when this feedback lowered the key's ceiling (an
	// overload outside the cooldown of the last decrease).
	Lowered bool `json:"lowered"`
	// AdaptiveRefill is the key's ceiling after the feedback.
	AdaptiveRefill  float64 `json:"adaptive_refill_per_second"`
	RefillPerSecond float64 `json:"refill_per_second"`
	MinRefill       float64 `json:"min_refill_per_second"`
}

// AdaptiveRefill reports, for the adaptive limit named name, the ceiling
// this limiter last read or set for any of its keys (a check's or a
// feedback's); false for a limit that is not adaptive or when none was
// read yet.
func (l *Limiter) AdaptiveRefill(name string) (float64, bool) {
	c := l.compiled.Load()
	i := c.index(name)
	if i < 0 || c.adapt == nil || c.adapt[i] == nil {
		return 0, false
	}
	b := c.adapt[i].last.Load()
	return math.Float64frombits(b), b != 0
}

// Feedback tells the adaptive limits (policy.Limit.Adaptive) that apply to
// desc, or only those named in names, of a call's outcome: overloaded
// lowers each key's ceiling to max(min_refill_per_second,
// ceiling·decrease), unless it was lowered less than cooldown ago (by any
// instance sharing the store); otherwise (ok) the ceiling is read, not
// changed (it climbs by itself, increase_per_second). A name that is not
// an adaptive limit applying to desc is an *UnknownLimitError; no adaptive
// limit applying is not an error (an empty answer). The gauge
// sluice_limit_refill_per_second of each limit shows the ceiling this
// feedback left.
func (l *Limiter) Feedback(ctx context.Context, desc map[string]string, overloaded bool, names []string) ([]FeedbackStatus, error) {
	c := l.compiled.Load()
	var applicable []string
	var idx []int
	for i, lim := range c.p.Limits {
		if c.adapt == nil || c.adapt[i] == nil {
			continue
		}
		if _, ok := lim.Match(desc); !ok {
			continue
		}
		applicable = append(applicable, lim.Name)
		if names == nil || slices.Contains(names, lim.Name) {
			idx = append(idx, i)
		}
	}
	for _, n := range names {
		if !slices.Contains(applicable, n) {
			return nil, &UnknownLimitError{Name: n, Applicable: applicable}
		}
	}
	out := make([]FeedbackStatus, 0, len(idx))
	for _, i := range idx {
		a, lim := c.adapt[i], c.p.Limits[i]
		kb, user := c.appendKey(i, nil, c.prefix[i], desc)
		key := string(kb)
		ckey, dkey := ceilingKey(key, "adaptive_cooldown"), ceilingKey(key, "adaptive")
		items := []store.Item{{Key: dkey, Spec: a.dspec}}
		if overloaded {
			items = append(items, store.Item{Key: ckey, Spec: a.cspec, Cost: 1})
		}
		res, err := l.st.Take(ctx, items)
		if err != nil {
			return nil, fmt.Errorf("limiter: feedback for %q: %w", lim.Name, err)
		}
		level := items[0].Decision.Remaining
		st := FeedbackStatus{Name: lim.Name, Key: key[user:], RefillPerSecond: a.base.Bucket.Limit().Rate, MinRefill: a.a.MinRefill}
		if overloaded && res.Allowed {
			r := max(a.a.MinRefill, a.rate(level)*a.a.Decrease)
			to := min(max(int64((r-a.a.MinRefill)/a.q), 0), level)
			if to < level {
				if err := l.st.Adjust(ctx, []store.Adjustment{{Key: dkey, Spec: a.dspec, Lower: true, Delta: to}}); err != nil {
					return nil, fmt.Errorf("limiter: feedback for %q: %w", lim.Name, err)
				}
			}
			level, st.Lowered = to, true
		}
		a.note(key, level)
		st.AdaptiveRefill = a.rate(level)
		l.m.refill.WithLabelValues(lim.Name).Set(st.AdaptiveRefill)
		out = append(out, st)
	}
	return out, nil
}
