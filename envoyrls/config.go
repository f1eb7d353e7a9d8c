// Package envoyrls serves Envoy's RateLimitService v3 (ShouldRateLimit over
// gRPC) from configuration in the format of Envoy's reference ratelimit
// service, so that existing deployments switch without rewriting config —
// with real token buckets, and all-or-nothing admission across a request's
// descriptors (the reference service consumes from the descriptors that
// were under limit even when another one is over it; sluice does not).
//
// Each rate_limit becomes a token bucket of capacity requests_per_unit
// refilled at requests_per_unit per unit, one bucket per distinct
// descriptor value. Matching follows the reference service: within the
// request's domain, for each entry of a descriptor, an exact key and value
// beats a wildcard value ("foo*"), which beats a key-only node; the limit of
// the node reached by the descriptor's last entry applies; a descriptor
// deeper than the tree, or in an unknown domain, is OK with no limit.
// unlimited is always OK; shadow_mode counts but reports OK.
//
// Not supported (rejected when present, so nothing is silently ignored):
// replaces, share_threshold, quota_mode, detailed_metric, value_to_metric.
package envoyrls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// Config is every domain loaded from a directory.
type Config struct {
	Domains map[string]*Node
}

// Node is one level of a domain's descriptor tree.
type Node struct {
	Key, Value string // Value "" matches any value (key-only); "x*" a prefix
	Limit      *Limit
	Shadow     bool
	Children   []*Node
}

// Limit is a node's rate_limit.
type Limit struct {
	Name            string
	Unit            rls.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32
	Unlimited       bool
	spec            *store.Spec
}

var units = map[string]struct {
	unit rls.RateLimitResponse_RateLimit_Unit
	secs float64
}{
	"second": {rls.RateLimitResponse_RateLimit_SECOND, 1},
	"minute": {rls.RateLimitResponse_RateLimit_MINUTE, 60},
	"hour":   {rls.RateLimitResponse_RateLimit_HOUR, 3600},
	"day":    {rls.RateLimitResponse_RateLimit_DAY, 86400},
	"week":   {rls.RateLimitResponse_RateLimit_WEEK, 7 * 86400},
	"month":  {rls.RateLimitResponse_RateLimit_MONTH, 30 * 86400},
	"year":   {rls.RateLimitResponse_RateLimit_YEAR, 365 * 86400},
}

// LoadDir reads every *.yaml (and *.yml) file in dir, each one domain.
func LoadDir(dir string) (*Config, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	cfg := &Config{Domains: map[string]*Node{}}
	for _, f := range files {
		if ext := filepath.Ext(f); ext != ".yaml" && ext != ".yml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		domain, root, err := Parse(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if _, dup := cfg.Domains[domain]; dup {
			return nil, fmt.Errorf("%s: domain %q is defined twice", f, domain)
		}
		cfg.Domains[domain] = root
	}
	if len(cfg.Domains) == 0 {
		return nil, fmt.Errorf("envoy config: no *.yaml file in %s", dir)
	}
	return cfg, nil
}

// Parse parses one file: its domain and descriptor tree. Errors carry the
// line.
func Parse(src []byte) (string, *Node, error) {
	if len(src) > 4<<20 {
		return "", nil, errors.New("file larger than 4 MiB")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return "", nil, fmt.Errorf("YAML: %v", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return "", nil, errors.New("line 1: the file must be a mapping with domain and descriptors")
	}
	root := &Node{}
	domain := ""
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		switch k.Value {
		case "domain":
			domain = v.Value
		case "descriptors":
			kids, err := parseNodes(v, 0)
			if err != nil {
				return "", nil, err
			}
			root.Children = kids
		default:
			return "", nil, fmt.Errorf("line %d: unknown field %q", k.Line, k.Value)
		}
	}
	if domain == "" {
		return "", nil, fmt.Errorf("line %d: missing domain", m.Line)
	}
	return domain, root, nil
}

func parseNodes(seq *yaml.Node, depth int) ([]*Node, error) {
	if seq.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: descriptors must be a list", seq.Line)
	}
	if depth > 32 {
		return nil, fmt.Errorf("line %d: descriptors nested deeper than 32", seq.Line)
	}
	var out []*Node
	for _, n := range seq.Content {
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: a descriptor must be a mapping", n.Line)
		}
		node := &Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch k.Value {
			case "key":
				node.Key = v.Value
			case "value":
				node.Value = v.Value
			case "shadow_mode":
				b, err := strconv.ParseBool(v.Value)
				if err != nil {
					return nil, fmt.Errorf("line %d: shadow_mode %q is not true or false", v.Line, v.Value)
				}
				node.Shadow = b
			case "rate_limit":
				l, err := parseLimit(v)
				if err != nil {
					return nil, err
				}
				node.Limit = l
			case "descriptors":
				kids, err := parseNodes(v, depth+1)
				if err != nil {
					return nil, err
				}
				node.Children = kids
			case "replaces", "share_threshold", "quota_mode", "detailed_metric", "value_to_metric":
				return nil, fmt.Errorf("line %d: %q is not supported by sluice", k.Line, k.Value)
			default:
				return nil, fmt.Errorf("line %d: unknown field %q in a descriptor", k.Line, k.Value)
			}
		}
		if node.Key == "" {
			return nil, fmt.Errorf("line %d: a descriptor needs a key", n.Line)
		}
		if i := strings.IndexByte(node.Value, '*'); i >= 0 && i != len(node.Value)-1 {
			return nil, fmt.Errorf("line %d: a wildcard value may only end in *", n.Line)
		}
		out = append(out, node)
	}
	return out, nil
}

func parseLimit(n *yaml.Node) (*Limit, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: rate_limit must be a mapping", n.Line)
	}
	l := &Limit{}
	unit := ""
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "unit":
			unit = strings.ToLower(v.Value)
		case "requests_per_unit":
			x, err := strconv.ParseUint(v.Value, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("line %d: requests_per_unit %q is not a whole number", v.Line, v.Value)
			}
			l.RequestsPerUnit = uint32(x)
		case "unlimited":
			b, err := strconv.ParseBool(v.Value)
			if err != nil {
				return nil, fmt.Errorf("line %d: unlimited %q is not true or false", v.Line, v.Value)
			}
			l.Unlimited = b
		case "name":
			l.Name = v.Value
		default:
			return nil, fmt.Errorf("line %d: unknown field %q in rate_limit", k.Line, k.Value)
		}
	}
	if l.Unlimited {
		return l, nil
	}
	u, ok := units[unit]
	if !ok {
		return nil, fmt.Errorf("line %d: rate_limit unit %q is not second, minute, hour, day, week, month or year", n.Line, unit)
	}
	if l.RequestsPerUnit < 1 {
		return nil, fmt.Errorf("line %d: requests_per_unit must be at least 1", n.Line)
	}
	l.Unit = u.unit
	spec, err := store.NewBucketSpec(bucket.Limit{Capacity: int64(l.RequestsPerUnit), Rate: float64(l.RequestsPerUnit) / u.secs})
	if err != nil {
		return nil, fmt.Errorf("line %d: %w", n.Line, err)
	}
	l.spec = spec
	return l, nil
}

// match walks a descriptor's entries down a domain's tree as the reference
// service does and returns the node reached, or nil when there is none (or
// the descriptor is deeper than the tree).
func match(root *Node, entries [][2]string) *Node {
	node := root
	for _, e := range entries {
		var exact, wild, keyOnly *Node
		for _, c := range node.Children {
			if c.Key != e[0] {
				continue
			}
			switch {
			case c.Value == e[1]:
				exact = c
			case strings.HasSuffix(c.Value, "*") && strings.HasPrefix(e[1], strings.TrimSuffix(c.Value, "*")):
				if wild == nil {
					wild = c
				}
			case c.Value == "":
				keyOnly = c
			}
		}
		switch {
		case exact != nil:
			node = exact
		case wild != nil:
			node = wild
		case keyOnly != nil:
			node = keyOnly
		default:
			return nil
		}
	}
	if node == root {
		return nil
	}
	return node
}
