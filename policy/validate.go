// The validator: a policy's YAML tree walked, every problem collected, in file order.

package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/suggest"
	"github.com/sluicehq/sluice/store"
)

// validator walks a policy's YAML tree and collects every problem it finds;
// a problem that does not depend on another is reported even when the other
// is.
type validator struct {
	errs  Errors
	names map[string]int // limit name -> line of its first definition
	// defaultPriorityNode is default_priority's value (priority.go).
	defaultPriorityNode *yaml.Node
}

func (v *validator) add(e *Error) { v.errs = append(v.errs, e) }

func (v *validator) at(n *yaml.Node, limit, field, msg string) {
	v.add(&Error{Line: n.Line, Column: n.Column, Limit: limit, Field: field, Msg: msg})
}

// sorted returns the errors in file order (line, then column).
func (v *validator) sorted() Errors {
	slices.SortStableFunc(v.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	return v.errs
}

// pair is one key: value of a mapping.
type pair struct{ key, val *yaml.Node }

// pairs returns the entries of mapping n in file order, reporting (and
// dropping) a key given twice.
func (v *validator) pairs(n *yaml.Node, limit string) []pair {
	ps := make([]pair, 0, len(n.Content)/2)
	first := make(map[string]int, len(n.Content)/2) // key -> its line
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if line, dup := first[k.Value]; dup {
			v.at(k, limit, k.Value, fmt.Sprintf("given twice (first at line %d)", line))
			continue
		}
		first[k.Value] = k.Line
		ps = append(ps, pair{k, n.Content[i+1]})
	}
	return ps
}

// topFields are the fields of the top-level mapping.
var topFields = []string{"limits", "costs", "redact", "request_descriptors", "allow_unmatched", "overrides", "prices", "default_price", "priorities", "default_priority"}

// policy validates the top-level mapping root into p.
func (v *validator) policy(root *yaml.Node, p *Policy) {
	seenLimits, limitsOK := false, false
	var request, redact *yaml.Node
	for _, f := range v.pairs(root, "") {
		switch f.key.Value {
		case "limits":
			n := len(v.errs)
			seenLimits = true
			v.limits(f.val, p)
			limitsOK = len(v.errs) == n
		case "costs":
			v.costs(f.val, p)
		case "redact":
			p.Redact, redact = v.redact(f.val), f.val
		case "request_descriptors":
			request = f.val
		case "prices":
			v.prices(f.val, p)
		case "default_price":
			v.defaultPrice(f.val, p)
		case "priorities":
			v.priorities(f.val, p)
		case "default_priority":
			v.defaultPriority(f.val, p)
		case "overrides":
			// Read and validated by the overrides package (FromPolicy),
			// which sluice serve and sluice check call on every load.
		case "allow_unmatched":
			if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!bool" {
				p.AllowUnmatched = strings.EqualFold(f.val.Value, "true")
			} else {
				v.at(f.val, "", "allow_unmatched", fmt.Sprintf("%q is not true or false", f.val.Value))
			}
		default:
			v.at(f.key, "", f.key.Value, "unknown field"+suggestOrList(f.key.Value, topFields))
		}
	}
	if !seenLimits {
		v.add(&Error{Line: root.Line, Column: root.Column, Msg: "missing limits list"})
	}
	if request != nil { // (after the limits, which it checks)
		v.requestDescriptors(request, p)
	}
	if redact != nil && limitsOK { // (a limit in error is not in p.Limits: its key would look unused)
		v.checkRedact(redact, p)
	}
	v.checkCosts(p)
	v.checkGates(p)
	v.checkPrices(p)
	v.checkPriorities(p)
}

func (v *validator) limits(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.SequenceNode {
		v.at(n, "", "limits", "must be a list")
		return
	}
	if len(n.Content) == 0 {
		v.at(n, "", "limits", "no limits: a policy must have at least one limit")
		return
	}
	for _, ln := range n.Content {
		if l := v.limit(ln); l != nil {
			p.Limits = append(p.Limits, l)
		}
	}
}

func (v *validator) costs(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.SequenceNode {
		v.at(n, "", "costs", "must be a list")
		return
	}
	for _, cn := range n.Content {
		if c, ok := v.cost(cn); ok {
			p.Costs = append(p.Costs, c)
		}
	}
}

// redact validates the list of descriptor names to redact: each a valid
// descriptor name, none twice.
func (v *validator) redact(n *yaml.Node) []string {
	if n.Kind != yaml.SequenceNode {
		v.at(n, "", "redact", "must be a list of descriptor names")
		return nil
	}
	names := []string{}
	first := map[string]int{}
	for _, e := range n.Content {
		switch prev, dup := first[e.Value]; {
		case e.Kind != yaml.ScalarNode || e.ShortTag() == "!!null":
			v.at(e, "", "redact", "each entry must be a descriptor name")
		case !validName(e.Value):
			v.at(e, "", "redact", fmt.Sprintf("descriptor name %q must be letters, digits, _ - or .", e.Value))
		case dup:
			v.at(e, "", "redact", fmt.Sprintf("%q given twice (first at line %d)", e.Value, prev))
		default:
			first[e.Value] = e.Line
			names = append(names, e.Value)
		}
	}
	return names
}

// checkRedact reports each redact entry that no limit's key uses: it
// would redact nothing (a misspelled name, most likely).
func (v *validator) checkRedact(n *yaml.Node, p *Policy) {
	var used []string
	for _, l := range p.Limits {
		for _, name := range l.Placeholders() {
			if !slices.Contains(used, name) {
				used = append(used, name)
			}
		}
	}
	for _, e := range n.Content {
		if !slices.Contains(p.Redact, e.Value) || slices.Contains(used, e.Value) {
			continue // (an invalid entry is reported already)
		}
		msg := fmt.Sprintf("%q is not a descriptor of any limit's key, so it would redact nothing", e.Value)
		if len(used) > 0 {
			msg += suggestOrList(e.Value, used)
		}
		v.at(e, "", "redact", msg)
	}
}

// checkCosts reports each cost rule whose requests could never be admitted
// by a limit they all hit.
func (v *validator) checkCosts(p *Policy) {
	for _, c := range p.Costs {
		for _, l := range p.Limits {
			if !l.Kind.HoldsSlots() && !l.CountsUsage() && c.Cost > l.Capacity() && alwaysHits(c.When, l) {
				v.add(&Error{Line: c.costLine, Column: c.costColumn, Field: "cost", Msg: fmt.Sprintf(
					"cost %d exceeds the capacity %d of limit %q (line %d), which every request of this class hits: they could never be admitted",
					c.Cost, l.Capacity(), l.Name, l.Line)})
			}
		}
	}
}

// limitFields is one limit's mapping under validation: its fields by name
// and where its problems are reported.
type limitFields struct {
	v      *validator
	node   *yaml.Node
	name   string // the limit's name, when it has one
	keys   []*yaml.Node
	fields map[string]*yaml.Node
	errs   int // len(v.errs) before the limit
}

func (v *validator) limitFields(n *yaml.Node) *limitFields {
	f := &limitFields{v: v, node: n, errs: len(v.errs), fields: map[string]*yaml.Node{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, val := n.Content[i], n.Content[i+1]; k.Value == "name" && val.Kind == yaml.ScalarNode {
			f.name = val.Value
			break
		}
	}
	for _, p := range v.pairs(n, f.name) {
		f.keys = append(f.keys, p.key)
		f.fields[p.key.Value] = p.val
	}
	return f
}

// failed reports whether any problem of this limit has been reported.
func (f *limitFields) failed() bool { return len(f.v.errs) > f.errs }

func (f *limitFields) has(field string) bool { return f.fields[field] != nil }

// bad reports a problem with field, at the field's value when it is given,
// else at the limit.
func (f *limitFields) bad(field, format string, args ...any) {
	node := f.fields[field]
	if node == nil {
		node = f.node
	}
	f.v.at(node, f.name, field, fmt.Sprintf(format, args...))
}

// str returns a scalar field's value; false when it is absent or not a
// scalar (reported).
func (f *limitFields) str(field string) (string, bool) {
	node := f.fields[field]
	if node == nil {
		return "", false
	}
	if node.Kind != yaml.ScalarNode {
		f.bad(field, "must be a scalar")
		return "", false
	}
	return node.Value, true
}

// integer returns a whole-number field (1_000 allowed); false when it is
// absent or malformed (reported).
func (f *limitFields) integer(field string) (int64, bool) {
	s, ok := f.str(field)
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		f.bad(field, "%q is not a whole number", s)
		return 0, false
	}
	return x, true
}

// duration returns a duration field; false when it is absent or malformed
// (reported).
func (f *limitFields) duration(field string) (time.Duration, bool) {
	s, ok := f.str(field)
	if !ok {
		return 0, false
	}
	d, err := ParseDuration(s)
	if err != nil {
		f.bad(field, "%v", err)
		return 0, false
	}
	return d, true
}

// atLeastOne returns a required whole-number field that must be >= 1;
// false when it is missing or invalid (reported).
func (f *limitFields) atLeastOne(field string) (int64, bool) {
	if !f.has(field) {
		f.bad(field, "missing %s", field)
		return 0, false
	}
	x, ok := f.integer(field)
	if ok && x < 1 {
		f.bad(field, "%s %d must be at least 1", field, x)
		return x, false
	}
	return x, ok
}

// positive returns a required duration field that must be > 0; false when
// it is missing or invalid (reported).
func (f *limitFields) positive(field, missing string) (time.Duration, bool) {
	if !f.has(field) {
		f.bad(field, "%s", missing)
		return 0, false
	}
	d, ok := f.duration(field)
	if ok && d <= 0 {
		f.bad(field, "%s %v must be positive", field, d)
		return d, false
	}
	return d, ok
}

// limit validates one entry of the limits list; nil when it has problems
// (all reported).
func (v *validator) limit(n *yaml.Node) *Limit {
	if n.Kind != yaml.MappingNode {
		v.at(n, "", "", "a limit must be a mapping")
		return nil
	}
	f := v.limitFields(n)
	l := &Limit{Line: n.Line}
	f.common(l)
	f.unit(l) // (before the kind reads a usd limit's dollars)
	f.alerts(l)
	kind, known := f.kind()
	l.Kind = kind
	if known {
		kindDefs[kind].parse(f, l)
		f.adaptive(l)
		f.envoySettle(l)
		f.fairShare(l)
	}
	f.unknownFields(kind, known)
	if f.failed() {
		return nil
	}
	return l
}

// storeErrorModes are the values of on_store_error.
var storeErrorModes = store.ErrorModes()

// common validates the fields every kind takes (except algorithm).
func (f *limitFields) common(l *Limit) {
	f.limitName(l)
	key, ok := f.str("key")
	if !ok || key == "" {
		f.bad("key", "missing or empty key template")
	} else if parts, ph, err := parseKey(key); err != nil {
		f.bad("key", "%v", err)
	} else {
		l.Key, l.params, l.placeh = key, parts, ph
	}
	f.hashTag(l)
	f.newKeyGate(l)
	if w := f.fields["when"]; w != nil {
		l.When = f.v.stringMap(w, f.name, "when", true)
	}
	if n := f.fields["shadow"]; n != nil {
		switch {
		case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool":
			l.Shadow = strings.EqualFold(n.Value, "true")
			if l.Shadow && f.has("max_in_flight") {
				f.bad("shadow", "a max_in_flight limit cannot be a shadow one: a shadow request holds no slot, so it would never see one taken")
			}
		default:
			f.bad("shadow", "%q is not true or false", n.Value)
		}
	}
	if s, ok := f.str("on_store_error"); ok {
		if slices.Contains(storeErrorModes, s) {
			l.OnStoreError = s
		} else {
			f.bad("on_store_error", "%q is not %s%s", s, orList(storeErrorModes), suggest.DidYouMean(s, storeErrorModes))
		}
	}
}

// limitName validates the name, which must be unique in the file.
func (f *limitFields) limitName(l *Limit) {
	name, ok := f.str("name")
	switch {
	case !ok && f.has("name"):
		// not a scalar: reported
	case name == "":
		f.bad("name", "missing or empty name")
	case !validName(name):
		f.bad("name", "name %q must be letters, digits, _ - or .", name)
	default:
		l.Name = name
		if prev, dup := f.v.names[name]; dup {
			f.bad("name", "duplicate name (first at line %d)", prev)
		} else {
			f.v.names[name] = f.node.Line
		}
	}
}

// hashTag validates hash_tag, whose placeholders must be among the key's
// (checked only when the key itself is valid).
func (f *limitFields) hashTag(l *Limit) {
	tag, ok := f.str("hash_tag")
	if !ok {
		return
	}
	parts, ph, err := parseKey(tag)
	switch {
	case tag == "":
		f.bad("hash_tag", "empty hash_tag (omit the field instead)")
	case err != nil:
		f.bad("hash_tag", "%v", err)
	default:
		for _, n := range ph {
			if l.Key != "" && !slices.Contains(l.placeh, n) {
				f.bad("hash_tag", "placeholder {%s} is not in the key template %q", n, l.Key)
			}
		}
		l.HashTag, l.tag = tag, parts
	}
}

// suggestOrList is suggest.DidYouMean(s, fields), else the list of fields.
func suggestOrList(s string, fields []string) string {
	if hint := suggest.DidYouMean(s, fields); hint != "" {
		return hint
	}
	return " (want " + orList(fields) + ")"
}

// orList is "a", "a or b", "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// stringMap validates a mapping of descriptor: value; with names, each
// descriptor must be a valid descriptor name.
func (v *validator) stringMap(n *yaml.Node, limit, field string, names bool) map[string]string {
	if n.Kind != yaml.MappingNode {
		v.at(n, limit, field, "must be a mapping of descriptor: value")
		return nil
	}
	m := map[string]string{}
	for _, p := range v.pairs(n, limit) {
		k, val := p.key, p.val
		switch {
		case names && !validName(k.Value):
			v.at(k, limit, field, fmt.Sprintf("descriptor name %q must be letters, digits, _ - or .", k.Value))
		case val.Kind != yaml.ScalarNode:
			v.at(val, limit, field, fmt.Sprintf("value of %q must be a scalar", k.Value))
		default:
			m[k.Value] = val.Value
		}
	}
	return m
}

// costFields are the fields of a cost rule.
var costFields = []string{"when", "cost"}

// cost validates one cost rule; false when it has problems (reported).
func (v *validator) cost(n *yaml.Node) (CostRule, bool) {
	c := CostRule{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		v.at(n, "", "costs", "a cost rule must be a mapping with when and cost")
		return c, false
	}
	errs := len(v.errs)
	hasCost := false
	for _, p := range v.pairs(n, "") {
		k, val := p.key, p.val
		switch k.Value {
		case "when":
			c.When = v.stringMap(val, "", "when", false)
		case "cost":
			hasCost = true
			c.costLine, c.costColumn = val.Line, val.Column
			x, err := strconv.ParseInt(val.Value, 10, 64)
			if err != nil || val.Kind != yaml.ScalarNode {
				v.at(val, "", "cost", fmt.Sprintf("%q is not a whole number", val.Value))
			} else if x < 1 {
				v.at(val, "", "cost", fmt.Sprintf("cost %d must be at least 1", x))
			}
			c.Cost = x
		default:
			v.at(k, "", k.Value, "unknown field in a cost rule"+suggestOrList(k.Value, costFields))
		}
	}
	if !hasCost {
		v.at(n, "", "cost", "missing cost")
	}
	if w := c.When; len(w) == 0 && !slices.ContainsFunc(v.errs[errs:], func(e *Error) bool { return e.Field == "when" }) {
		v.at(n, "", "when", "a cost rule needs a non-empty when")
	}
	return c, len(v.errs) == errs
}
