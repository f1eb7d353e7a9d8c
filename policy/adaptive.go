// A limit's adaptive ceiling (adaptive: {min_refill_per_second, decrease,
// increase_per_second, cooldown}): its validation.

package policy

import (
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Adaptive makes a token bucket's refill_per_second a ceiling that learns
// from feedback (POST /v1/feedback, outcome "overloaded"): an overload
// lowers the key's refill to max(MinRefill, refill·Decrease), at most once
// per Cooldown, and the refill climbs back by Increase per second up to
// the limit's refill_per_second (AIMD, as gate.Config.Adaptive). Each key
// of the limit has a ceiling of its own, kept in the store next to its
// bucket, so that every instance sharing the store decides under it.
type Adaptive struct {
	// MinRefill (min_refill_per_second) is the lowest refill; it must be
	// positive and below the limit's refill_per_second.
	MinRefill float64
	// Decrease (decrease) is the factor of an overload, in (0, 1);
	// default 0.5.
	Decrease float64
	// Increase (increase_per_second) is the climb per second; default 1 %
	// of refill_per_second.
	Increase float64
	// Cooldown (cooldown) is the shortest time between two decreases of a
	// key's ceiling; default 1s.
	Cooldown time.Duration
}

// adaptiveFields are the fields of adaptive.
var adaptiveFields = []string{"min_refill_per_second", "decrease", "increase_per_second", "cooldown"}

// adaptive validates a limit's adaptive field (its kind already parsed).
func (f *limitFields) adaptive(l *Limit) {
	n := f.fields["adaptive"]
	if n == nil {
		return
	}
	if !l.Kind.Adaptable() {
		f.bad("adaptive", "adaptive applies to a token_bucket limit (its refill_per_second), not a %s", l.Kind)
		return
	}
	if n.Kind != yaml.MappingNode {
		f.bad("adaptive", "adaptive must be a mapping: {min_refill_per_second, decrease, increase_per_second, cooldown}")
		return
	}
	max := l.Bucket.Rate
	a := &Adaptive{Decrease: 0.5, Increase: max / 100, Cooldown: time.Second}
	seen := map[string]bool{}
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		seen[k] = true
		num := func() (float64, bool) {
			x, err := strconv.ParseFloat(v.Value, 64)
			if v.Kind != yaml.ScalarNode || err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				f.bad("adaptive", "adaptive.%s must be a number, not %q", k, v.Value)
				return 0, false
			}
			return x, true
		}
		switch k {
		case "min_refill_per_second":
			x, good := num()
			ok = ok && good
			a.MinRefill = x
		case "decrease":
			x, good := num()
			ok = ok && good
			if good && !(x > 0 && x < 1) {
				f.bad("adaptive", "adaptive.decrease %v must be in (0, 1) (0.5 halves the refill on an overload)", x)
				ok = false
			}
			a.Decrease = x
		case "increase_per_second":
			x, good := num()
			ok = ok && good
			if good && !(x > 0) {
				f.bad("adaptive", "adaptive.increase_per_second %v must be positive", x)
				ok = false
			}
			a.Increase = x
		case "cooldown":
			d, err := time.ParseDuration(v.Value)
			if err != nil || d < 0 {
				f.bad("adaptive", "adaptive.cooldown %q must be a duration (e.g. 1s), not negative", v.Value)
				ok = false
			}
			a.Cooldown = d
		default:
			f.bad("adaptive", "unknown field adaptive.%s (want %s)", k, orList(adaptiveFields))
			ok = false
		}
	}
	if !seen["min_refill_per_second"] {
		f.bad("adaptive", "adaptive needs min_refill_per_second (the lowest refill an overload may bring the limit to)")
		return
	}
	if ok && !(a.MinRefill > 0 && a.MinRefill < max) {
		f.bad("adaptive", "adaptive.min_refill_per_second %v must be positive and below refill_per_second %v", a.MinRefill, max)
		ok = false
	}
	if ok {
		l.Adaptive = a
	}
}
