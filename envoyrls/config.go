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
// unlimited is always OK; shadow_mode counts but reports OK. A descriptor
// that carries its own limit (RateLimitDescriptor.limit, Envoy's
// per-request override) is limited by it instead, as the reference service
// does: requests_per_unit per unit in a known domain, whatever the tree
// holds for it (Service.ShouldRateLimit).
//
// The reference's other fields have its meaning (as of its main branch,
// after envoyproxy/ratelimit#1059): replaces (a matched limit that
// replaces another by name drops that one from the call), quota_mode (a
// quota descriptor over its limit fails the call only when every quota
// descriptor of the call is over), share_threshold (every value matching
// a wildcard shares one bucket), detailed_metric and value_to_metric (the
// request's values in the reference-named metrics, bounded; see
// RegisterReference); metadata is accepted and not used. A wildcard may
// stand anywhere in a value ("foo*bar*"), each * any run of characters;
// requests_per_unit 0 refuses every request.
package envoyrls

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/yamlmsg"

	"go.yaml.in/yaml/v3"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/suggest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// Config is every domain loaded from a directory.
type Config struct {
	Domains map[string]*Node
}

// Node is one level of a domain's descriptor tree.
type Node struct {
	Key, Value string // Value "" matches any value (key-only); with a *, a wildcard
	Limit      *Limit
	Shadow     bool
	Children   []*Node

	Quota          bool // quota_mode
	DetailedMetric bool // detailed_metric
	ValueToMetric  bool // value_to_metric
	ShareThreshold bool // share_threshold: values matching the wildcard share one bucket

	wild     []string                 // Value split at each *, when it has one
	settleBy []string                 // a domain's root: the by keys of its envoy_settle limits (settle_config.go)
	ref      atomic.Pointer[refCache] // where the reference's metrics count it, once known
}

// Limit is a node's rate_limit.
type Limit struct {
	Name            string
	Unit            rls.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32 // 0: every request is over the limit
	Unlimited       bool
	Replaces        []string // names of the limits this one replaces when both match
	// EnvoySettle (envoy_settle, a sluice extension) books and settles the
	// limit by request id (settle_envoy.go); nil: not.
	EnvoySettle *policy.EnvoySettle
	spec        *store.Spec
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

// ErrInvalid is matched (errors.Is) by every error of a malformed
// configuration that LoadDir and Parse return (an Errors). Errors about the
// directory itself (missing, not a directory, no file) do not match it.
var ErrInvalid = errors.New("invalid Envoy ratelimit config")

// Error is one problem of a configuration file, at the line and column of
// the YAML node at fault.
type Error struct {
	File         string // the file's path as LoadDir found it; "" from Parse
	Line, Column int    // 1-based; 0 when not known
	Msg          string
	err          error // the cause, when there is one (see Unwrap)
}

// Error formats e as "FILE: line L, column C: msg", leaving out what is not
// known.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ", column %d", e.Column)
		}
		b.WriteString(": ")
	}
	return b.String() + e.Msg
}

// Unwrap is the cause of e (an I/O error, or a limit's error matching
// sluice.ErrInvalidLimit), or nil.
func (e *Error) Unwrap() error { return e.err }

// Errors is every problem found, ordered by file, then line, then column.
// It is never empty when returned as an error.
type Errors []*Error

// Error is the problem when there is one, else a line "envoy config: N
// problems:" followed by each problem on its own line, indented by two
// spaces.
func (es Errors) Error() string {
	if len(es) == 1 {
		return es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "envoy config: %d problems:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Is reports whether target is ErrInvalid.
func (es Errors) Is(target error) bool { return target == ErrInvalid }

// Unwrap is each problem, so that errors.Is and errors.As also see their
// causes.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// dirError is a problem of LoadDir's directory, wrapping its cause.
type dirError struct {
	msg string
	err error
}

func (e *dirError) Error() string { return e.msg }
func (e *dirError) Unwrap() error { return e.err }

// MaxFileSize bounds one configuration file (4 MiB).
const MaxFileSize = 4 << 20

// LoadFiles reads each file, in the order given, each one domain, as
// LoadDir does the files of its directory; no file is an empty
// configuration (no domain: every descriptor is OK with no limit).
func LoadFiles(files []string) (*Config, error) {
	cfg := &Config{Domains: map[string]*Node{}}
	where := map[string]string{} // domain -> the file defining it
	var errs Errors
	for _, f := range files { // in name order (os.ReadDir sorts)
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, &Error{File: f, Msg: err.Error(), err: err})
			continue
		}
		p := &parser{}
		domain, dn, root := p.file(b)
		if domain != "" {
			if first, dup := where[domain]; dup {
				p.at(dn, "domain %q is defined twice (first in %s)", domain, first)
			} else {
				where[domain] = f
			}
		}
		for _, e := range p.sorted() {
			e.File = f
			errs = append(errs, e)
		}
		if len(p.errs) == 0 {
			cfg.Domains[domain] = root
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// Parse parses one file: its domain and descriptor tree. On error it
// returns Errors, which lists every problem with its line and column (and
// matches ErrInvalid).
func Parse(src []byte) (string, *Node, error) {
	p := &parser{}
	domain, _, root := p.file(src)
	if len(p.errs) > 0 {
		return "", nil, p.sorted()
	}
	return domain, root, nil
}

// Field names, for suggestions.
var (
	fileFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	limitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "envoy_settle"}
	unitNames   = []string{"second", "minute", "hour", "day", "week", "month", "year"}
)

// parser collects every problem of one file; a problem that does not follow
// from another is reported even when the other is.
type parser struct{ errs Errors }

// at records a problem at n's position.
func (p *parser) at(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
}

// sorted is p.errs in line, then column order.
func (p *parser) sorted() Errors {
	sort.SliceStable(p.errs, func(i, j int) bool {
		a, b := p.errs[i], p.errs[j]
		return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
	})
	return p.errs
}

// fields calls f for each key and value of the mapping n, once per key: a
// key given twice is a problem (YAML decoders disagree on which one wins).
func (p *parser) fields(n *yaml.Node, f func(k, v *yaml.Node)) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			p.at(k, "field %q is given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		f(k, v)
	}
}

// file parses a whole file: its domain ("" when missing or bad), the node
// of the domain's value (for later problems about it), and its tree.
func (p *parser) file(src []byte) (string, *yaml.Node, *Node) {
	if len(src) > MaxFileSize {
		p.errs = append(p.errs, &Error{Msg: fmt.Sprintf("file of %d bytes exceeds the maximum %d", len(src), MaxFileSize)})
		return "", nil, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		p.errs = append(p.errs, yamlError(err))
		return "", nil, nil
	}
	if len(doc.Content) == 0 {
		p.errs = append(p.errs, &Error{Line: 1, Column: 1, Msg: "empty file: it needs a domain and descriptors"})
		return "", nil, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		p.at(m, "the file must be a mapping with domain and descriptors")
		return "", nil, nil
	}
	root := &Node{}
	domain := ""
	var dn *yaml.Node
	p.fields(m, func(k, v *yaml.Node) {
		switch k.Value {
		case "domain":
			dn = v
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				p.at(v, "domain must be a non-empty string")
				return
			}
			domain = v.Value
		case "descriptors":
			root.Children = p.nodes(v, 0)
		default:
			p.at(k, "unknown field %q%s", k.Value, suggest.DidYouMean(k.Value, fileFields))
		}
	})
	if dn == nil {
		p.at(m, "missing domain")
	}
	p.settleKeys(m, root)
	return domain, dn, root
}

func (p *parser) nodes(seq *yaml.Node, depth int) []*Node {
	if seq.Kind != yaml.SequenceNode {
		p.at(seq, "descriptors must be a list")
		return nil
	}
	if depth > 32 {
		p.at(seq, "descriptors nested deeper than 32")
		return nil
	}
	var out []*Node
	for _, n := range seq.Content {
		if n.Kind != yaml.MappingNode {
			p.at(n, "a descriptor must be a mapping with a key")
			continue
		}
		node := &Node{}
		hasKey := false
		var share *yaml.Node
		p.fields(n, func(k, v *yaml.Node) {
			switch k.Value {
			case "key":
				hasKey = true
				if v.Kind != yaml.ScalarNode || v.Value == "" {
					p.at(v, "key must be a non-empty string")
					return
				}
				node.Key = v.Value
			case "value":
				if v.Kind != yaml.ScalarNode {
					p.at(v, "value must be a string")
					return
				}
				node.Value = v.Value
				if strings.Contains(v.Value, "*") {
					node.wild = strings.Split(v.Value, "*")
				}
			case "shadow_mode":
				node.Shadow = p.boolean(k, v)
			case "quota_mode":
				node.Quota = p.boolean(k, v)
			case "detailed_metric":
				node.DetailedMetric = p.boolean(k, v)
			case "value_to_metric":
				node.ValueToMetric = p.boolean(k, v)
			case "share_threshold":
				share = k
				node.ShareThreshold = p.boolean(k, v)
			case "metadata":
				// Accepted (the reference returns it as dynamic metadata
				// when asked); not used.
			case "rate_limit":
				node.Limit = p.limit(v)
			case "descriptors":
				node.Children = p.nodes(v, depth+1)
			case "replaces", "unit", "requests_per_unit", "unlimited", "name":
				p.at(k, "%q belongs in the descriptor's rate_limit", k.Value)
			default:
				p.at(k, "unknown field %q in a descriptor%s", k.Value, suggest.DidYouMean(k.Value, descriptorFields))
			}
		})
		if !hasKey {
			p.at(n, "a descriptor needs a key")
		}
		if node.ShareThreshold && node.wild == nil {
			p.at(share, "share_threshold can only be used with a wildcard value (containing *)")
		}
		p.checkSettle(n, node)
		if l := node.Limit; l != nil {
			for _, r := range l.Replaces {
				if r == l.Name && r != "" {
					p.at(n, "rate_limit %q replaces itself", r)
				}
			}
		}
		out = append(out, node)
	}
	return out
}

// boolean is the value of the boolean field k: v, or a problem.
func (p *parser) boolean(k, v *yaml.Node) bool {
	b, err := strconv.ParseBool(v.Value)
	if err != nil || v.Kind != yaml.ScalarNode {
		p.at(v, "%s %q is not true or false", k.Value, v.Value)
	}
	return b
}

func (p *parser) limit(n *yaml.Node) *Limit {
	if n.Kind != yaml.MappingNode {
		p.at(n, "rate_limit must be a mapping with unit and requests_per_unit")
		return nil
	}
	before := len(p.errs)
	l := &Limit{}
	var unit, rpu *yaml.Node
	p.fields(n, func(k, v *yaml.Node) {
		switch k.Value {
		case "unit":
			unit = v
		case "requests_per_unit":
			rpu = v
		case "unlimited":
			l.Unlimited = p.boolean(k, v)
		case "name":
			if v.Kind != yaml.ScalarNode {
				p.at(v, "name must be a string")
				return
			}
			l.Name = v.Value
		case "replaces":
			l.Replaces = p.replaces(v)
		case "envoy_settle":
			l.EnvoySettle = p.envoySettle(v)
		default:
			p.at(k, "unknown field %q in rate_limit%s", k.Value, suggest.DidYouMean(k.Value, limitFields))
		}
	})
	var secs float64
	switch {
	case unit != nil:
		u, ok := units[strings.ToLower(unit.Value)]
		if !ok || unit.Kind != yaml.ScalarNode {
			p.at(unit, "unit %q is not second, minute, hour, day, week, month or year%s", unit.Value, suggest.DidYouMean(unit.Value, unitNames))
		}
		l.Unit, secs = u.unit, u.secs
	case !l.Unlimited:
		p.at(n, "rate_limit needs a unit (second, minute, hour, day, week, month or year)")
	}
	switch {
	case rpu != nil:
		x, err := strconv.ParseInt(rpu.Value, 10, 64)
		switch {
		case rpu.Kind != yaml.ScalarNode || err != nil && !errors.Is(err, strconv.ErrRange):
			p.at(rpu, "requests_per_unit %q is not a whole number: it must be at least 0", rpu.Value)
		case x < 0:
			p.at(rpu, "requests_per_unit %s: it must be at least 0 (0 refuses every request)", rpu.Value)
		case err != nil || x > math.MaxUint32:
			p.at(rpu, "requests_per_unit %s: it must be at most %d", rpu.Value, uint32(math.MaxUint32))
		default:
			l.RequestsPerUnit = uint32(x)
		}
	case !l.Unlimited:
		p.at(n, "rate_limit needs requests_per_unit (a whole number, at least 0)")
	}
	if l.Unlimited || len(p.errs) > before || l.RequestsPerUnit == 0 {
		return l // (0 per unit: no spec, every request over the limit)
	}
	spec, err := store.NewBucketSpec(bucket.Limit{Capacity: int64(l.RequestsPerUnit), Rate: float64(l.RequestsPerUnit) / secs})
	if err != nil {
		p.errs = append(p.errs, &Error{Line: n.Line, Column: n.Column, Msg: err.Error(), err: err})
		return l
	}
	l.spec = spec
	return l
}

// replaces is a rate_limit's replaces: a list of mappings, each with a
// non-empty name.
func (p *parser) replaces(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.at(v, "replaces must be a list of {name: NAME}")
		return nil
	}
	var out []string
	for _, e := range v.Content {
		if e.Kind != yaml.MappingNode {
			p.at(e, "a replaces entry must be a mapping with a name")
			continue
		}
		name := ""
		p.fields(e, func(k, v *yaml.Node) {
			if k.Value != "name" {
				p.at(k, "unknown field %q in a replaces entry (it has only name)", k.Value)
				return
			}
			if v.Kind != yaml.ScalarNode {
				p.at(v, "name must be a string")
				return
			}
			name = v.Value
		})
		if name == "" {
			p.at(e, "a replaces entry needs a non-empty name")
			continue
		}
		out = append(out, name)
	}
	return out
}

// yamlError is a YAML syntax error as an Error, its "yaml: line N:" prefix
// turned into the Error's line.
func yamlError(err error) *Error {
	line, msg := yamlmsg.Split(err)
	if line == 0 {
		line = 1
	}
	return &Error{Line: line, Msg: msg}
}
