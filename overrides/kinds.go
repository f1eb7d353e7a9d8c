// The kinds of limit as overrides know them: one table, the parameters each
// kind takes and how they change a policy limit.
package overrides

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/policy"
)

// kindDef is what an override may change in one kind of limit: the
// parameter fields (JSON names) it takes, and apply, which writes the
// given ones into a copy of the policy limit.
type kindDef struct {
	fields   []string
	apply    func(l *policy.Limit, p *Params) *Error
	noShadow string // why the kind cannot be a shadow limit; empty when it can
}

// kindDefs is indexed by Kind; a kind missing here takes no parameters
// (only unlimited, deny, shadow and block_for).
var kindDefs = [...]kindDef{
	policy.TokenBucket:   {[]string{"capacity", "refill_per_second", "refill"}, applyBucket, ""},
	policy.SlidingWindow: {[]string{"limit", "window"}, applyWindow, ""},
	policy.FixedWindow:   {[]string{"limit", "window"}, applyWindow, ""},
	policy.Quota:         {[]string{"limit"}, applyQuota, ""},
	policy.Concurrency: {[]string{"max_in_flight"}, applyConcurrency,
		"a max_in_flight limit cannot be a shadow one: a shadow request holds no slot"},
}

// kindOf returns the definition of kind k (nil when there is none).
func kindOf(k policy.Kind) *kindDef {
	if int(k) < len(kindDefs) && kindDefs[k].apply != nil {
		return &kindDefs[k]
	}
	return nil
}

// owners is "token_bucket limits" or "sliding_window, fixed_window and
// quota limits": the kinds that take field.
func owners(field string) string {
	var names []string
	for k := range kindDefs {
		if slices.Contains(kindDefs[k].fields, field) {
			names = append(names, policy.Kind(k).String())
		}
	}
	if n := len(names); n > 1 {
		return strings.Join(names[:n-1], ", ") + " and " + names[n-1] + " limits"
	}
	return strings.Join(names, "") + " limits"
}

// given lists the parameter fields p sets, in Params order.
func (p *Params) given() []string {
	var f []string
	add := func(set bool, name string) {
		if set {
			f = append(f, name)
		}
	}
	add(p.Capacity != 0, "capacity")
	add(p.RefillPerSecond != 0, "refill_per_second")
	add(p.Refill != "", "refill")
	add(p.Limit != 0, "limit")
	add(p.Window != 0, "window")
	add(p.MaxInFlight != 0, "max_in_flight")
	return f
}

func applyBucket(l *policy.Limit, p *Params) *Error {
	if p.Capacity > 0 {
		l.Bucket.Capacity = p.Capacity
	}
	field := "capacity"
	switch {
	case p.RefillPerSecond > 0:
		l.Bucket.Rate, field = p.RefillPerSecond, "refill_per_second"
	case p.Refill != "":
		r, err := policy.ParseRate(p.Refill)
		if err != nil {
			return errorf(ErrBadRequest, l.Name, "refill", "%v", err)
		}
		l.Bucket.Rate, field = r, "refill"
	}
	if err := l.Bucket.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), "sluice: ")
		if strings.Contains(msg, "capacity") && p.Capacity > 0 {
			field = "capacity"
		}
		return errorf(ErrBadRequest, l.Name, field, "%s (capacity %d, refill %v/s)", msg, l.Bucket.Capacity, l.Bucket.Rate)
	}
	return nil
}

func applyWindow(l *policy.Limit, p *Params) *Error {
	if p.Limit > 0 {
		l.Window.Limit = p.Limit
	}
	if p.Window > 0 {
		l.Window.Window = p.Window
	}
	if err := l.Window.Validate(); err != nil {
		return errorf(ErrBadRequest, l.Name, "limit", "%s", strings.TrimPrefix(err.Error(), "sluice: "))
	}
	return nil
}

func applyQuota(l *policy.Limit, p *Params) *Error {
	if p.Limit > 0 {
		l.Quota.Limit = p.Limit
	}
	if err := l.Quota.Validate(); err != nil {
		return errorf(ErrBadRequest, l.Name, "limit", "%s", strings.TrimPrefix(err.Error(), "sluice: "))
	}
	return nil
}

func applyConcurrency(l *policy.Limit, p *Params) *Error {
	if p.MaxInFlight > 0 {
		l.MaxInFlight = p.MaxInFlight
	}
	return nil
}
