// Priority classes on the check path: a request's class resolved by the
// policy and applied to its items (store.Item.Reserve, its max_queue_ms
// cutting MaxWait).

package limiter

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// classify resolves req's class (Request.Priority, else the policy's
// default_priority), records it in res, and sets each item's reserve; a
// class that bounds its queue cuts req.MaxWait to its max_queue_ms (0:
// the request never waits). An unknown class is an error, and so is a
// cost above what the class may ever take of an enforced limit (a
// *CostError, classCostError), nothing taken.
func (c *compiled) classify(req *Request, items []store.Item, res *Result) error {
	cls, err := c.p.Priority(req.Priority)
	if err != nil {
		return fmt.Errorf("limiter: %w", err)
	}
	res.Priority, res.class = cls.Name, c.classIndex(cls.Name)
	req.MaxWait = cls.MaxWait(req.MaxWait)
	if cls.Reserve != 0 {
		for j := range items {
			items[j].Reserve = cls.Reserve
			if st := &res.Limits[j]; !st.Shadow && !skipped(st.Override) {
				if err := classCostError(&items[j], st.Name); err != nil {
					return err
				}
			}
		}
	}
	for i := range res.Limits {
		res.Limits[i].Priority = cls.Name
	}
	return nil
}

// classCostError is the *CostError of enforced item it of limit name when
// its cost is above what its class may ever take
// (store.Spec.ClassCapacity: one slot of an in-flight cap), as for a cost
// above the capacity: it can never be admitted, retrying is useless.
func classCostError(it *store.Item, name string) error {
	cost := it.Cost
	if it.Spec.HoldsSlots() {
		cost = min(cost, 1)
	}
	if n := it.Spec.ClassCapacity(it.Reserve); cost > n {
		return &CostError{Limit: name, Cost: cost, Capacity: n}
	}
	return nil
}

// ErrMixedPriorities is matched by the error of a CheckMany whose requests
// name different classes: a call is decided as one request, under one
// class.
var ErrMixedPriorities = errors.New("limiter: the requests of one call name different priority classes")

// callClass is the class of a CheckMany call: every request's class
// (Request.Priority, else the default) must be the same.
func (c *compiled) callClass(reqs []Request) (policy.Priority, error) {
	var cls policy.Priority
	for i := range reqs {
		k, err := c.p.Priority(reqs[i].Priority)
		if err != nil {
			return cls, fmt.Errorf("limiter: %w", err)
		}
		if i > 0 && k.Name != cls.Name {
			return cls, fmt.Errorf("%w (%q and %q)", ErrMixedPriorities, cls.Name, k.Name)
		}
		cls = k
	}
	return cls, nil
}

// classified reports whether any request names a class or the policy has
// a default one (else a check has no class: no work).
func (c *compiled) classified(reqs []Request) bool {
	if c.p.DefaultPriority != "" {
		return true
	}
	for i := range reqs {
		if reqs[i].Priority != "" {
			return true
		}
	}
	return false
}

// setClass records class cls in a CheckMany's results and sets its
// reserve on the call's items: items, the enforced ones, and shadow.
// Enforced item j is the one request r's limit k refers to (refs[r][k] ==
// j; which[r][k] its policy index); a cost above what the class may ever
// take of one is its *CostError (classCostError).
func (c *compiled) setClass(cls policy.Priority, out *ManyResult, items, shadow []store.Item, refs, which [][]int) error {
	for r := range out.Results {
		out.Results[r].Priority, out.Results[r].class = cls.Name, c.classIndex(cls.Name)
		for k := range out.Results[r].Limits {
			out.Results[r].Limits[k].Priority = cls.Name
		}
	}
	if cls.Reserve == 0 {
		return nil
	}
	for j := range shadow {
		shadow[j].Reserve = cls.Reserve
	}
	for j := range items {
		items[j].Reserve = cls.Reserve
		if err := classCostError(&items[j], ""); err != nil {
			err.(*CostError).Limit = c.itemLimit(j, refs, which)
			return err
		}
	}
	return nil
}

// itemLimit is the name of the limit of CheckMany's enforced item j
// (refs and which as for setClass).
func (c *compiled) itemLimit(j int, refs, which [][]int) string {
	for r := range refs {
		for k, x := range refs[r] {
			if x == j {
				return c.p.Limits[which[r][k]].Name
			}
		}
	}
	return ""
}

// decisionCounter is sluice_decisions_total's series for a limit, result,
// attempt and class: labelled by class from the first policy with
// priorities (at New or a reload; the class "" for a request with none),
// else without the label, the series as before classes (decisions.go).
func (l *Limiter) decisionCounter(limit, result, attempt, class string) prometheus.Counter {
	return l.m.decisions.counter(limit, result, attempt, class)
}

// classMetrics makes limit i's counters of each of c's classes, when the
// decisions are counted by class.
func (l *Limiter) classMetrics(c *compiled, i int, name string) {
	if !l.m.decisions.classed() || len(c.p.Priorities) == 0 {
		return
	}
	if c.classCtr == nil {
		c.classCtr = make([][][3][2]prometheus.Counter, len(c.p.Priorities))
		for k := range c.classCtr {
			c.classCtr[k] = make([][3][2]prometheus.Counter, len(c.p.Limits))
		}
	}
	for k, cls := range c.p.Priorities {
		for r, result := range decisionResults {
			for a, attempt := range attempts {
				c.classCtr[k][i][r][a] = l.decisionCounter(name, result, attempt, cls.Name)
			}
		}
	}
}

// classIndex is 1 + the index of class name in c's classes when its
// decisions are counted by class, else 0 (counted as no class).
func (c *compiled) classIndex(name string) int {
	if c.classCtr == nil {
		return 0
	}
	for k := range c.p.Priorities {
		if c.p.Priorities[k].Name == name {
			return k + 1
		}
	}
	return 0
}
