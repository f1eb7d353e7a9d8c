// new_key_gate: the limit a request must pass before a limit's new key is
// created, and its validation.

package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/suggest"
)

// gatePos is where a limit's new_key_gate is written.
type gatePos struct{ line, column int }

// newKeyGate reads the limit's new_key_gate (checked against the other
// limits once all are read: checkGates).
func (f *limitFields) newKeyGate(l *Limit) {
	n := f.fields["new_key_gate"]
	if n == nil {
		return
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" || n.Value == "" {
		f.bad("new_key_gate", "must name another limit of this policy")
		return
	}
	l.NewKeyGate, l.gate = n.Value, gatePos{n.Line, n.Column}
}

// checkGates reports each new_key_gate that names no limit, the limit
// itself, a shadow limit (which never refuses), or a limit that does not
// apply to every request the gated limit applies to (its when must be
// among the gated limit's, and its key's descriptors among the gated
// key's and when's); and gates that form a cycle. Limits with other
// problems are not in p.Limits: a gate naming one is checked for its name
// only.
func (v *validator) checkGates(p *Policy) {
	for _, l := range p.Limits {
		if l.NewKeyGate == "" {
			continue
		}
		bad := func(format string, args ...any) {
			v.add(&Error{Line: l.gate.line, Column: l.gate.column, Limit: l.Name, Field: "new_key_gate", Msg: fmt.Sprintf(format, args...)})
		}
		g := p.Limit(l.NewKeyGate)
		_, named := v.names[l.NewKeyGate]
		switch {
		case l.NewKeyGate == l.Name:
			bad("a limit cannot be its own new_key_gate: name the limit (a tenant's, an IP's) a request must pass before this limit creates a key")
			continue
		case g == nil && !named:
			bad("no limit named %q in this policy%s", l.NewKeyGate, suggest.DidYouMean(l.NewKeyGate, slices.Sorted(maps.Keys(v.names))))
			continue
		case g == nil:
			continue // (the limit has problems of its own, reported)
		case g.Shadow:
			bad("limit %q (line %d) is a shadow limit: it never refuses, so it cannot hold back new keys", g.Name, g.Line)
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(g.When)) {
			if want, ok := l.When[k]; !ok || want != g.When[k] {
				bad("limit %q (line %d) applies only when %s is %q, which this limit does not require: a request without it would create this limit's keys ungated (give this limit the same when, or gate on another limit)",
					g.Name, g.Line, k, g.When[k])
			}
		}
		for _, name := range g.Placeholders() {
			if _, inWhen := l.When[name]; !slices.Contains(l.Placeholders(), name) && !inWhen {
				bad("limit %q (line %d) needs descriptor %q (key %q), which this limit's key %q does not: a request without it would create this limit's keys ungated (gate on a limit whose key uses only this limit's descriptors, such as \"tenant:{tenant}\" in front of \"user:{tenant}:{user}\")",
					g.Name, g.Line, name, g.Key, l.Key)
			}
		}
	}
	// Cycles: follow each limit's gates (each limit has at most one).
	reported := map[string]bool{}
	for _, l := range p.Limits {
		path := []string{l.Name}
		for at := l; at.NewKeyGate != "" && !reported[l.Name]; {
			next := p.Limit(at.NewKeyGate)
			if next == nil || next == at {
				break
			}
			if i := slices.Index(path, next.Name); i >= 0 {
				cycle := append(path[i:], next.Name)
				if i == 0 { // (else it is reported from its first limit)
					for _, n := range cycle {
						reported[n] = true
					}
					v.add(&Error{Line: l.gate.line, Column: l.gate.column, Limit: l.Name, Field: "new_key_gate",
						Msg: "new_key_gate limits form a cycle: " + strings.Join(cycle, " → ")})
				}
				break
			}
			path = append(path, next.Name)
			at = next
		}
	}
}
