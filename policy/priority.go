// Priority classes (priorities, default_priority): who goes first when a
// limit's budget is short. Parsed exactly (a reserve is parts per million,
// never a float); docs/policy.md "Priority classes", docs/behaviour.md
// "Priority classes".

package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ReserveScale is the denominator of Priority.Reserve: parts per million
// (store.ReserveScale).
const ReserveScale = 1_000_000

// Priority is one priority class: requests of it may not use the last
// Reserve of a limit's capacity (parts per million: 0.2 is 200000), and
// may book at most MaxQueue of refill into the line when QueueBounded
// (max_queue_ms given; 0 then: never waits). The zero Priority is today's
// behaviour: the whole capacity, any depth the request's max_wait allows.
type Priority struct {
	Name         string
	Reserve      uint32
	MaxQueue     time.Duration
	QueueBounded bool
}

// MaxWait is the longest a request of class c that would wait up to
// maxWait may be booked for: min(maxWait, max_queue_ms) when the class
// bounds its queue, else maxWait.
func (c Priority) MaxWait(maxWait time.Duration) time.Duration {
	if c.QueueBounded {
		return min(maxWait, c.MaxQueue)
	}
	return maxWait
}

// ErrUnknownPriority is matched by the error of a request naming a class
// the policy does not list (HTTP 400 unknown_priority, gRPC
// INVALID_ARGUMENT).
var ErrUnknownPriority = errors.New("unknown priority")

// UnknownPriorityError names the class that is not in the policy.
type UnknownPriorityError struct {
	Name    string
	Classes []string // the policy's classes, highest first
}

// Error reads `unknown priority "x" (the policy's classes: a, b)`, or
// `(the policy has no priorities)`.
func (e *UnknownPriorityError) Error() string {
	if len(e.Classes) == 0 {
		return fmt.Sprintf("%v %q (the policy has no priorities)", ErrUnknownPriority, e.Name)
	}
	return fmt.Sprintf("%v %q (the policy's classes: %s)", ErrUnknownPriority, e.Name, strings.Join(e.Classes, ", "))
}

// Unwrap returns ErrUnknownPriority.
func (e *UnknownPriorityError) Unwrap() error { return ErrUnknownPriority }

// Priority returns the class a request naming name belongs to: the class
// of that name; for "" the default_priority class, or the zero Priority
// (today's behaviour) when the policy names no default. Any other name is
// an *UnknownPriorityError (matching ErrUnknownPriority), also when the
// policy lists no classes.
func (p *Policy) Priority(name string) (Priority, error) {
	if name == "" {
		name = p.DefaultPriority
		if name == "" {
			return Priority{}, nil
		}
	}
	for _, c := range p.Priorities {
		if c.Name == name {
			return c, nil
		}
	}
	names := make([]string, len(p.Priorities))
	for i, c := range p.Priorities {
		names[i] = c.Name
	}
	return Priority{}, &UnknownPriorityError{Name: name, Classes: names}
}

// ParseReserve reads a reserve written as a decimal fraction from 0 to
// below 1 ("0.2", "0.125", "0") exactly into parts per million; more than
// 6 decimal places, a sign, an exponent or a value of 1 or more is an
// error.
func ParseReserve(s string) (uint32, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal fraction such as 0.2", s)
	}
	if strings.TrimLeft(whole, "0") != "" {
		return 0, fmt.Errorf("%s must be below 1 (a class that may use nothing)", s)
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > 6 {
		return 0, fmt.Errorf("%s has more than 6 decimal places (a reserve is read in parts per million)", s)
	}
	if frac == "" {
		return 0, nil
	}
	n, _ := strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 32)
	return uint32(n), nil
}

// priorityFields are a class's fields.
var priorityFields = []string{"name", "reserve", "max_queue_ms"}

// priorities validates the priorities list into p.
func (v *validator) priorities(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.SequenceNode {
		v.at(n, "", "priorities", "must be a list of classes, highest first")
		return
	}
	seen := map[string]int{}
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode {
			v.at(e, "", "priorities", "each class must be a mapping with a name")
			continue
		}
		var c Priority
		ok := true
		var nameNode *yaml.Node
		for _, f := range v.pairs(e, "") {
			val := f.val
			switch f.key.Value {
			case "name":
				nameNode = val
				c.Name = val.Value
				if val.Kind != yaml.ScalarNode || !validClassName(c.Name) {
					v.at(val, "", "name", fmt.Sprintf("%q is not a class name (letters, digits, _ and -)", val.Value))
					ok = false
				}
			case "reserve":
				r, err := ParseReserve(val.Value)
				if val.Kind != yaml.ScalarNode || err != nil {
					if err == nil {
						err = errors.New("must be a decimal fraction such as 0.2")
					}
					v.at(val, c.Name, "reserve", err.Error())
					ok = false
				}
				c.Reserve = r
			case "max_queue_ms":
				ms, err := strconv.ParseInt(val.Value, 10, 64)
				if val.Kind != yaml.ScalarNode || err != nil || ms < 0 || ms > int64(maxQueueMs) {
					v.at(val, c.Name, "max_queue_ms", fmt.Sprintf("%q is not a whole number of ms from 0 to %d", val.Value, maxQueueMs))
					ok = false
				}
				c.MaxQueue, c.QueueBounded = time.Duration(ms)*time.Millisecond, true
			default:
				v.at(f.key, c.Name, f.key.Value, "unknown field"+suggestOrList(f.key.Value, priorityFields))
				ok = false
			}
		}
		if nameNode == nil {
			v.at(e, "", "name", "a class needs a name")
			continue
		}
		if line, dup := seen[c.Name]; dup {
			v.at(nameNode, c.Name, "name", fmt.Sprintf("class given twice (first at line %d)", line))
			continue
		}
		seen[c.Name] = nameNode.Line
		if !ok {
			continue
		}
		if len(p.Priorities) > 0 {
			// Listed from highest to lowest: a lower class sees no more
			// of a bucket and no longer a line than a higher one.
			hi := p.Priorities[len(p.Priorities)-1]
			if c.Reserve < hi.Reserve {
				v.at(nameNode, c.Name, "reserve", fmt.Sprintf("below that of %q, listed above it (classes go from highest to lowest: a lower class reserves at least as much)", hi.Name))
			}
			if hi.QueueBounded && (!c.QueueBounded || c.MaxQueue > hi.MaxQueue) {
				v.at(nameNode, c.Name, "max_queue_ms", fmt.Sprintf("longer than that of %q, listed above it (a lower class may queue no deeper)", hi.Name))
			}
		}
		p.Priorities = append(p.Priorities, c)
	}
}

// maxQueueMs bounds max_queue_ms (a day).
const maxQueueMs = 24 * 3600 * 1000

// validClassName reports whether s is a class name: 1 to 64 letters,
// digits, _ and -.
func validClassName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// defaultPriority validates default_priority (checked against the
// classes by checkPriorities, after them).
func (v *validator) defaultPriority(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.ScalarNode || n.Value == "" {
		v.at(n, "", "default_priority", "must name one of the priorities")
		return
	}
	p.DefaultPriority = n.Value
	v.defaultPriorityNode = n
}

// checkPriorities checks that default_priority names a class.
func (v *validator) checkPriorities(p *Policy) {
	n := v.defaultPriorityNode
	if n == nil {
		return
	}
	if _, err := p.Priority(p.DefaultPriority); err != nil {
		v.at(n, "", "default_priority", err.Error())
		p.DefaultPriority = ""
	}
}
