// Priority classes of a gate, shared or in process: the Priority call
// option, Config.Priorities and a call's class in the local queue
// (docs/behaviour.md section 7).

package gate

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// Priority makes a call (Do, Reserve) one of class name, one of
// Config.Priorities: its budgets (Limit and every Dimension) are cut by
// the class's reserve, its in-flight slots to its share of MaxInFlight,
// and its wait by the class's MaxQueue, so that a lower class never takes
// what a higher one needs (docs/behaviour.md section 7). A shared gate
// sends the reserve to the store (store.Item.Reserve); a gate in process
// books on its own buckets by the same rule (bucket.ReserveClass), and its
// queue lets a call of a higher class pass a waiter of a lower class that
// cannot go yet. A name the gate does not list fails the call with an
// error matching policy.ErrUnknownPriority, taking nothing.
func Priority(name string) Option { return func(o *callOpts) { o.priority = name } }

// classKey carries a call's class (policy.Priority) in its context, from
// Do or Reserve to the shared admission.
type classKey struct{}

// classed returns ctx carrying the class and the tenant the options name
// (ctx itself when they name neither).
func (g *Gate) classed(ctx context.Context, opts []Option) (context.Context, error) {
	if len(opts) == 0 {
		return ctx, nil // (no options: nothing to read, and nothing allocated)
	}
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	ctx = g.withTenant(ctx, o.tenant)
	if o.priority == "" {
		return ctx, nil
	}
	p := policy.Policy{Priorities: g.cfg.Priorities}
	cls, err := p.Priority(o.priority)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, classKey{}, cls), nil
}

// class is a call's priority class as the in-process gate applies it.
type class struct {
	p     policy.Priority // its fields (the zero Priority: none)
	rank  int             // its index in Config.Priorities; -1: none named
	slots int             // the in-flight slots it may fill: MaxInFlight cut by its reserve
}

// localClass is the class ctx carries (classed), or none (rank -1, the
// whole budget).
func (g *Gate) localClass(ctx context.Context) class {
	c := class{rank: -1, slots: g.cfg.MaxInFlight}
	if len(g.cfg.Priorities) == 0 {
		return c
	}
	p, ok := ctx.Value(classKey{}).(policy.Priority)
	if !ok {
		return c
	}
	for i := range g.cfg.Priorities {
		if g.cfg.Priorities[i].Name == p.Name {
			c.rank = i
			break
		}
	}
	c.p, c.slots = p, int(store.Reserved(int64(g.cfg.MaxInFlight), p.Reserve))
	return c
}

// checkPriorities validates Config.Priorities: names not empty nor given
// twice, reserves below policy.ReserveScale, MaxQueue not negative, and
// at least one token of Limit's and each Dimension's capacity and, with
// MaxInFlight, one slot left to every class (a class's view of a budget,
// store.Reserved of it, is what it may ever take).
func checkPriorities(cfg Config) error {
	if len(cfg.Priorities) == 0 {
		return nil
	}
	bad := func(msg string) error {
		return sluice.Errorf(sluice.ErrInvalidLimit, "gate config: Priorities: %s", msg)
	}
	seen := map[string]bool{}
	for _, c := range cfg.Priorities {
		switch {
		case c.Name == "" || seen[c.Name]:
			return bad("class " + c.Name + " has no name or is given twice")
		case c.Reserve >= policy.ReserveScale:
			return bad("class " + c.Name + "'s reserve must be below 1 (1,000,000 parts per million)")
		case c.MaxQueue < 0:
			return bad("class " + c.Name + "'s MaxQueue must not be negative")
		case cfg.MaxInFlight > 0 && store.Reserved(int64(cfg.MaxInFlight), c.Reserve) == 0:
			return bad(fmt.Sprintf("class %s's reserve leaves it none of the %d in-flight slots (MaxInFlight)", c.Name, cfg.MaxInFlight))
		case cfg.Limit.Capacity > 0 && store.Reserved(cfg.Limit.Capacity, c.Reserve) == 0:
			return bad(fmt.Sprintf("class %s's reserve leaves it no token of the capacity %d (Limit)", c.Name, cfg.Limit.Capacity))
		}
		for _, d := range cfg.Dimensions {
			if d.Limit.Capacity > 0 && store.Reserved(d.Limit.Capacity, c.Reserve) == 0 {
				return bad(fmt.Sprintf("class %s's reserve leaves it no token of dimension %q's capacity %d", c.Name, d.Name, d.Limit.Capacity))
			}
		}
		seen[c.Name] = true
	}
	return nil
}

// classCostError is the error of a call of the class ctx carries whose
// cost (or a dimension's charge, ch) is above what the class may ever
// take of that budget, store.Reserved of its capacity (a bucket's whole
// tokens of its class capacity): sluice.ErrCostExceedsCapacity, as for a
// cost above the capacity. nil for a call of no class or within it.
func (g *Gate) classCostError(ctx context.Context, cost int64, ch []int64) error {
	cls, ok := ctx.Value(classKey{}).(policy.Priority)
	if !ok || cls.Reserve == 0 {
		return nil
	}
	if n := store.Reserved(g.limit.Capacity, cls.Reserve); cost > n {
		return sluice.Errorf(sluice.ErrCostExceedsCapacity, "gate %q: cost %d exceeds capacity %d, class %s's view of the capacity %d", g.name, cost, n, cls.Name, g.limit.Capacity)
	}
	for i, c := range ch {
		d := g.dims[i]
		if n := store.Reserved(d.limit.Capacity, cls.Reserve); c > n {
			return sluice.Errorf(sluice.ErrCostExceedsCapacity, "gate %q: dimension %q: cost %d exceeds capacity %d, class %s's view of the capacity %d", g.name, d.name, c, n, cls.Name, d.limit.Capacity)
		}
	}
	return nil
}
