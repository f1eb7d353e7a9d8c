// The policy file's own overrides: its top-level overrides list.
package overrides

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/policy"
)

// policyFields are the fields of an entry of the policy file's overrides
// list: an API override's, without ttl_s, source and the times.
var policyFields = func() map[string]field {
	m := map[string]field{}
	for k, f := range requestFields {
		switch k {
		case "ttl_s", "source", "created_at", "updated_at", "expires_at":
		default:
			m[k] = f
		}
	}
	return m
}()

// FromPolicy returns the overrides the policy file p was parsed from lists
// under its top-level overrides key, in file order, each with Source
// "policy" and stamped at loaded (Stamp): entries with the fields of the
// API's PUT body except ttl_s, source and the times, written as YAML
//
//	overrides:
//	  - name: tenant_api
//	    match: {tenant: acme}
//	    capacity: 500
//	    refill: 50/s
//
// (whole numbers may have underscores, 1_000; a match value is the
// scalar's text). Every entry is validated against p (Validate), and two
// entries with the same name and match are an error. On error it
// returns policy.Errors (matching policy.ErrInvalid) with every problem,
// each with its line and column, the override's limit and the field. A
// file without an overrides key has none (nil, nil).
func FromPolicy(p *policy.Policy, loaded time.Time) ([]Override, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(p.Source, &doc); err != nil {
		return nil, policy.Errors{{Line: 1, Msg: "overrides: " + err.Error()}}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil
	}
	var list *yaml.Node
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "overrides" {
			list = root.Content[i+1]
		}
	}
	if list == nil {
		return nil, nil
	}
	var errs policy.Errors
	at := func(n *yaml.Node, limit, field, msg string) {
		errs = append(errs, &policy.Error{Line: n.Line, Column: n.Column, Limit: limit, Field: field, Msg: msg})
	}
	if list.Kind != yaml.SequenceNode {
		at(list, "", "overrides", "must be a list")
		return nil, errs
	}
	var out []Override
	first := map[Key]int{}
	for _, en := range list.Content {
		o, nodes, ok := policyEntry(en, at)
		if !ok {
			continue
		}
		if _, err := compile(&o, p); err != nil {
			var e *Error
			errors.As(err, &e)
			n := nodes[e.Field]
			if n == nil {
				n = en
			}
			at(n, o.Name, e.Field, e.Msg)
			continue
		}
		k := o.Key()
		if line, dup := first[k]; dup {
			at(en, o.Name, "match", fmt.Sprintf("an override of %q with match %s is given twice (first at line %d)", o.Name, k.Match, line))
			continue
		}
		first[k] = en.Line
		o.Source = SourcePolicy
		o.Stamp(loaded, time.Time{})
		out = append(out, o)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// policyEntry decodes one entry of the overrides list, reporting its
// problems through at; nodes maps each field to its value's node.
func policyEntry(en *yaml.Node, at func(n *yaml.Node, limit, field, msg string)) (Override, map[string]*yaml.Node, bool) {
	var o Override
	if en.Kind != yaml.MappingNode {
		at(en, "", "overrides", "an override must be a mapping (name, match and the limit's fields)")
		return o, nil, false
	}
	nodes := map[string]*yaml.Node{}
	for i := 0; i+1 < len(en.Content); i += 2 {
		if en.Content[i].Value == "name" {
			o.Name = en.Content[i+1].Value
		}
	}
	ok := true
	for i := 0; i+1 < len(en.Content); i += 2 {
		k, v := en.Content[i], en.Content[i+1]
		f := policyFields[k.Value]
		switch {
		case nodes[k.Value] != nil:
			at(k, o.Name, k.Value, fmt.Sprintf("given twice (first at line %d)", nodes[k.Value].Line))
			ok = false
			continue
		case f == nil:
			msg := "unknown field of an override"
			if k.Value == "ttl_s" {
				msg = "a policy file's override has no ttl_s: it lasts as long as the file says it"
			}
			at(k, o.Name, k.Value, msg)
			ok = false
			continue
		}
		nodes[k.Value] = v
		raw, err := yamlJSON(v, k.Value == "match")
		if err == nil {
			err = f(&o, raw)
		}
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				err = errors.New(e.Msg)
			}
			at(v, o.Name, k.Value, err.Error())
			ok = false
		}
	}
	if nodes["match"] == nil && ok {
		at(en, o.Name, "match", "missing match (a mapping of descriptor: value; {} matches every request)")
		ok = false
	}
	return o, nodes, ok
}

// yamlJSON renders a YAML value as the JSON the field decoders read:
// integers without underscores, floats and booleans as themselves, other
// scalars as strings; with match, a mapping of scalars as an object of
// strings.
func yamlJSON(n *yaml.Node, match bool) ([]byte, error) {
	if match {
		if n.Kind != yaml.MappingNode {
			return nil, errors.New("must be a mapping of descriptor: value")
		}
		m := map[string]string{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("value of %q must be a scalar", k.Value)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("key %q is given twice", k.Value)
			}
			m[k.Value] = v.Value
		}
		return json.Marshal(m)
	}
	if n.Kind != yaml.ScalarNode {
		return nil, errors.New("must be a scalar")
	}
	switch n.ShortTag() {
	case "!!int":
		return []byte(strings.ReplaceAll(n.Value, "_", "")), nil
	case "!!float":
		return []byte(n.Value), nil
	case "!!bool":
		return []byte(strings.ToLower(n.Value)), nil
	case "!!null":
		return nil, errors.New("must not be empty")
	}
	return json.Marshal(n.Value)
}
