// envoy_settle in Envoy's configuration format: a rate_limit's
// envoy_settle {by, estimate}, and the by keys of a domain's tree.

package envoyrls

import (
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/policy"
)

// envoySettle parses a rate_limit's envoy_settle: {by: KEY, estimate: N},
// by a descriptor entry's key, estimate a whole number from 1 to
// requests_per_unit (checked by the caller, which knows it).
func (p *parser) envoySettle(v *yaml.Node) *policy.EnvoySettle {
	if v.Kind != yaml.MappingNode {
		p.at(v, "envoy_settle must be a mapping: {by: DESCRIPTOR_KEY, estimate: N}")
		return nil
	}
	es := &policy.EnvoySettle{}
	ok := true
	p.fields(v, func(k, v *yaml.Node) {
		switch k.Value {
		case "by":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				p.at(v, "envoy_settle.by must be a descriptor entry's key (the one that carries the request's id)")
				ok = false
				return
			}
			es.By = v.Value
		case "estimate":
			x, err := strconv.ParseInt(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || err != nil || x < 1 {
				p.at(v, "envoy_settle.estimate must be a whole number of at least 1, not %q", v.Value)
				ok = false
				return
			}
			es.Estimate = x
		default:
			p.at(k, "unknown field %q in envoy_settle (want by or estimate)", k.Value)
			ok = false
		}
	})
	switch {
	case !ok:
		return nil
	case es.By == "":
		p.at(v, "envoy_settle needs by (the descriptor entry that carries the request's id, such as one filled from x-request-id)")
		return nil
	case es.Estimate == 0:
		p.at(v, "envoy_settle needs estimate (the tokens the request path books)")
		return nil
	}
	return es
}

// checkSettle reports what a descriptor with an envoy_settle rate_limit
// may not be: unlimited, over its requests_per_unit, shadow_mode or
// quota_mode (their descriptors are not settled).
func (p *parser) checkSettle(n *yaml.Node, node *Node) {
	l := node.Limit
	if l == nil || l.EnvoySettle == nil {
		return
	}
	switch {
	case l.Unlimited:
		p.at(n, "an unlimited rate_limit takes no envoy_settle")
	case l.EnvoySettle.Estimate > int64(l.RequestsPerUnit):
		p.at(n, "envoy_settle.estimate %d is above requests_per_unit %d (no request could be booked)", l.EnvoySettle.Estimate, l.RequestsPerUnit)
	case node.Shadow || node.Quota:
		p.at(n, "a shadow_mode or quota_mode descriptor takes no envoy_settle")
	}
}

// settleKeys sets root's settleBy, the by keys of the envoy_settle limits
// of its tree, and reports a by key that is also a descriptor key of the
// tree (its entries are taken out of every call before matching: the
// request's id is never matched, never part of a key).
func (p *parser) settleKeys(doc *yaml.Node, root *Node) {
	var by, keys []string
	var walk func(ns []*Node)
	walk = func(ns []*Node) {
		for _, n := range ns {
			keys = append(keys, n.Key)
			if n.Limit != nil && n.Limit.EnvoySettle != nil && !slices.Contains(by, n.Limit.EnvoySettle.By) {
				by = append(by, n.Limit.EnvoySettle.By)
			}
			walk(n.Children)
		}
	}
	walk(root.Children)
	for _, b := range by {
		if slices.Contains(keys, b) {
			p.at(doc, "envoy_settle.by %q is also a descriptor key of the domain: the request's id entry is never matched", b)
		}
	}
	root.settleBy = by
}
