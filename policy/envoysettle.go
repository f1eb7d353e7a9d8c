// A limit's envoy_settle: reserve-then-settle through Envoy's
// RateLimitService, keyed by a descriptor entry that carries a per-request id.

package policy

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// EnvoySettle (envoy_settle) makes a limit reserve-then-settle through
// Envoy's RateLimitService (envoyrls): a call whose descriptor carries the
// entry By (a per-request id, such as one filled from x-request-id) books
// max(Estimate, the call's hits_addend) on the limit under that id; the
// next call with the same id (Envoy's apply_on_stream_done call, whose
// hits_addend is the tokens used) settles the booking to its hits_addend
// exactly. The By entry is never part of the limit's key.
type EnvoySettle struct {
	// By is the descriptor entry's key that carries the request's id.
	By string
	// Estimate is what the request path books when its own hits_addend
	// is smaller: at least 1, at most the limit's capacity.
	Estimate int64
}

// envoySettleFields are the fields of envoy_settle.
var envoySettleFields = []string{"by", "estimate"}

// envoySettle validates a limit's envoy_settle (its kind already parsed):
// a mapping {by, estimate}; by a descriptor name that is not one of the
// limit's key, hash_tag or when descriptors (the id is never part of a
// key), estimate a whole number from 1 to the limit's capacity; not on a
// max_in_flight limit (a slot is not settled).
func (f *limitFields) envoySettle(l *Limit) {
	n := f.fields["envoy_settle"]
	if n == nil {
		return
	}
	if l.Kind.HoldsSlots() {
		f.bad("envoy_settle", "a max_in_flight limit takes no envoy_settle (an in-flight slot is not settled)")
		return
	}
	if n.Kind != yaml.MappingNode {
		f.bad("envoy_settle", "envoy_settle must be a mapping: {by: DESCRIPTOR_KEY, estimate: N}")
		return
	}
	es := &EnvoySettle{}
	ok, hasEstimate := true, false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		switch k {
		case "by":
			if v.Kind != yaml.ScalarNode || !validName(v.Value) {
				f.bad("envoy_settle", "envoy_settle.by must be a descriptor key (letters, digits, _ - or .), not %q", v.Value)
				ok = false
				continue
			}
			es.By = v.Value
		case "estimate":
			x, err := strconv.ParseInt(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || err != nil || x < 1 {
				f.bad("envoy_settle", "envoy_settle.estimate must be a whole number of at least 1, not %q", v.Value)
				ok = false
				continue
			}
			es.Estimate, hasEstimate = x, true
		default:
			f.bad("envoy_settle", "unknown field envoy_settle.%s (want %s)", k, orList(envoySettleFields))
			ok = false
		}
	}
	if !ok {
		return
	}
	switch {
	case es.By == "":
		f.bad("envoy_settle", "envoy_settle needs by (the descriptor entry that carries the request's id, such as one filled from x-request-id)")
		return
	case !hasEstimate:
		f.bad("envoy_settle", "envoy_settle needs estimate (the tokens the request path books)")
		return
	case es.Estimate > l.Capacity():
		f.bad("envoy_settle", "envoy_settle.estimate %d is above the limit's capacity %d (no request could be booked)", es.Estimate, l.Capacity())
		return
	}
	if l.usesDescriptor(es.By) {
		f.bad("envoy_settle", "envoy_settle.by %q is a descriptor of the limit's key, hash_tag or when: the request's id is never part of a key", es.By)
		return
	}
	l.EnvoySettle = es
}

// usesDescriptor reports whether the limit's key, hash tag or when names
// descriptor name.
func (l *Limit) usesDescriptor(name string) bool {
	for _, p := range l.placeh {
		if p == name {
			return true
		}
	}
	for _, p := range l.tag {
		if p.name == name {
			return true
		}
	}
	_, inWhen := l.When[name]
	return inWhen
}

// SettleBy returns the descriptor keys that carry request ids for the
// policy's envoy_settle limits, each once, in policy order (nil: none).
func (p *Policy) SettleBy() []string {
	var out []string
	for _, l := range p.Limits {
		if l.EnvoySettle == nil {
			continue
		}
		seen := false
		for _, b := range out {
			seen = seen || b == l.EnvoySettle.By
		}
		if !seen {
			out = append(out, l.EnvoySettle.By)
		}
	}
	return out
}
