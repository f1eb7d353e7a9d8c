// Conversion of xDS RateLimitConfig resources into an envoyrls.Config, through the file format envoyrls.Parse reads.

package xds

import (
	"errors"
	"fmt"
	"strconv"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/envoyrls"
)

// TypeURL is the xDS resource type this client subscribes to, as
// envoyproxy/ratelimit and Envoy Gateway name it.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Convert turns a snapshot's resources into one configuration: each
// resource one domain, converted to the YAML file format (YAML) and read
// by envoyrls.Parse, so a resource means exactly what the same file would.
// Every problem of every resource is reported, each naming its resource
// and the field at fault ("resource "r1": descriptors[0].rate_limit.unit:
// ..."); a domain given by two resources is a problem (the reference
// service refuses it too unless told to merge). No resource is an empty
// configuration (no domain: everything is OK with no limit).
func Convert(resources []*anypb.Any) (*envoyrls.Config, error) {
	cfg := &envoyrls.Config{Domains: map[string]*envoyrls.Node{}}
	where := map[string]string{} // domain -> the resource defining it
	var errs envoyrls.Errors
	for i, res := range resources {
		conf := &rlsconf.RateLimitConfig{}
		if err := anypb.UnmarshalTo(res, conf, proto.UnmarshalOptions{}); err != nil {
			errs = append(errs, &envoyrls.Error{File: fmt.Sprintf("resource %d", i), Msg: fmt.Sprintf("not a RateLimitConfig: %v", err)})
			continue
		}
		label := fmt.Sprintf("resource %q", conf.GetName())
		if conf.GetName() == "" {
			label = fmt.Sprintf("resource %d", i)
		}
		src, err := YAML(conf)
		if err != nil {
			errs = append(errs, &envoyrls.Error{File: label, Msg: err.Error()})
			continue
		}
		domain, root, err := envoyrls.Parse(src)
		if err != nil {
			errs = append(errs, located(label, src, err)...)
			continue
		}
		if first, dup := where[domain]; dup {
			errs = append(errs, &envoyrls.Error{File: label, Msg: fmt.Sprintf("domain %q is defined twice (first in %s)", domain, first)})
			continue
		}
		where[domain] = label
		cfg.Domains[domain] = root
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// YAML is conf in the file format envoyrls.Parse reads, field by field as
// envoyproxy/ratelimit converts it (src/config/config_xds.go): domain,
// descriptors with key, value, rate_limit (unit, requests_per_unit,
// unlimited, name, replaces), shadow_mode, detailed_metric, quota_mode,
// metadata and nested descriptors. A field is written only when set, so
// a configuration using none of the newer fields reads the same whatever
// the parser supports. A unit of UNKNOWN (the proto's zero) is left out:
// the parser then asks for a unit unless the limit is unlimited.
func YAML(conf *rlsconf.RateLimitConfig) ([]byte, error) {
	root := mapping()
	add(root, "domain", str(conf.GetDomain()))
	if ds := conf.GetDescriptors(); len(ds) > 0 {
		seq, err := descriptors(ds, 0)
		if err != nil {
			return nil, err
		}
		add(root, "descriptors", seq)
	}
	return yaml.Marshal(root)
}

// maxDepth bounds the nesting converted (the parser refuses deeper than 32).
const maxDepth = 64

func descriptors(ds []*rlsconf.RateLimitDescriptor, depth int) (*yaml.Node, error) {
	if depth > maxDepth {
		return nil, errors.New("descriptors nested deeper than 64")
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, d := range ds {
		m := mapping()
		add(m, "key", str(d.GetKey()))
		if d.GetValue() != "" {
			add(m, "value", str(d.GetValue()))
		}
		if rl := d.GetRateLimit(); rl != nil {
			add(m, "rate_limit", rateLimit(rl))
		}
		if d.GetShadowMode() {
			add(m, "shadow_mode", boolean(true))
		}
		if d.GetDetailedMetric() {
			add(m, "detailed_metric", boolean(true))
		}
		if d.GetQuotaMode() {
			add(m, "quota_mode", boolean(true))
		}
		if md := d.GetMetadata(); md != nil && len(md.GetFields()) > 0 {
			n := &yaml.Node{}
			if err := n.Encode(md.AsMap()); err != nil {
				return nil, fmt.Errorf("descriptor %q: metadata: %v", d.GetKey(), err)
			}
			add(m, "metadata", n)
		}
		if sub := d.GetDescriptors(); len(sub) > 0 {
			n, err := descriptors(sub, depth+1)
			if err != nil {
				return nil, err
			}
			add(m, "descriptors", n)
		}
		seq.Content = append(seq.Content, m)
	}
	return seq, nil
}

func rateLimit(rl *rlsconf.RateLimitPolicy) *yaml.Node {
	m := mapping()
	if rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		add(m, "unit", str(rl.GetUnit().String()))
	}
	if !rl.GetUnlimited() || rl.GetRequestsPerUnit() > 0 {
		add(m, "requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10)})
	}
	if rl.GetUnlimited() {
		add(m, "unlimited", boolean(true))
	}
	if rl.GetName() != "" {
		add(m, "name", str(rl.GetName()))
	}
	if rs := rl.GetReplaces(); len(rs) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, r := range rs {
			e := mapping()
			add(e, "name", str(r.GetName()))
			seq.Content = append(seq.Content, e)
		}
		add(m, "replaces", seq)
	}
	return m
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func add(m *yaml.Node, k string, v *yaml.Node) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
}

// str is a string scalar, quoted so that no value ("true", "1", "") reads
// as another type.
func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: s}
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

// located is Parse's error for the YAML src of the resource label, each
// problem's line and column (meaningless to whoever wrote the resource)
// replaced by the path of the field there, such as
// descriptors[1].rate_limit.unit.
func located(label string, src []byte, err error) envoyrls.Errors {
	var es envoyrls.Errors
	if !errors.As(err, &es) {
		return envoyrls.Errors{{File: label, Msg: err.Error()}}
	}
	paths := map[[2]int]string{}
	var doc yaml.Node
	if yaml.Unmarshal(src, &doc) == nil && len(doc.Content) > 0 {
		walk(doc.Content[0], "", paths)
	}
	out := make(envoyrls.Errors, 0, len(es))
	for _, e := range es {
		c := *e // keeps the cause
		c.File, c.Line, c.Column = label, 0, 0
		if p := paths[[2]int{e.Line, e.Column}]; p != "" {
			c.Msg = p + ": " + e.Msg
		}
		out = append(out, &c)
	}
	return out // in the document's order, as Parse sorted them
}

// walk records in paths the path of n and of every value under it by
// their line and column. Keys are not recorded: a mapping starts where its
// first key does, and a problem there is the mapping's.
func walk(n *yaml.Node, path string, paths map[[2]int]string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			walk(n.Content[i+1], p, paths)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walk(c, fmt.Sprintf("%s[%d]", path, i), paths)
		}
	}
	paths[[2]int{n.Line, n.Column}] = path
}
