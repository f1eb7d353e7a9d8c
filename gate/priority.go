// Priority classes of a shared gate: the Priority call option and
// Config.Priorities (docs/behaviour.md section 7).

package gate

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Priority makes a call (Do, Reserve) one of class name, one of
// Config.Priorities: on a shared gate its budgets are cut by the class's
// reserve and its wait by the class's max_queue (store.Item.Reserve), so
// that a lower class never takes what a higher one needs. A name the gate
// does not list fails the call with an error matching
// policy.ErrUnknownPriority, taking nothing.
func Priority(name string) Option { return func(o *callOpts) { o.priority = name } }

// classKey carries a call's class (policy.Priority) in its context, from
// Do or Reserve to the shared admission.
type classKey struct{}

// classed returns ctx carrying the class the options name (ctx itself
// when they name none).
func (g *Gate) classed(ctx context.Context, opts []Option) (context.Context, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
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

// checkPriorities validates Config.Priorities: only with a Store, names
// not empty nor given twice, reserves below policy.ReserveScale.
func checkPriorities(cfg Config) error {
	if len(cfg.Priorities) == 0 {
		return nil
	}
	bad := func(msg string) error {
		return sluice.Errorf(sluice.ErrInvalidLimit, "gate config: Priorities: %s", msg)
	}
	if cfg.Store == nil {
		return bad("priority classes need a shared gate (Store)")
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
		}
		seen[c.Name] = true
	}
	return nil
}
