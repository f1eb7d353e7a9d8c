// Tickets: an admission reserved ahead of its call (Reserve), settled
// against what the call used and released; the charges of call options.

package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// Ticket is an admitted call holding its tokens and an in-flight slot.
type Ticket struct {
	g        *Gate
	res      *bucket.Reservation
	dres     []*bucket.Reservation // per dimension, in Config order
	sh       *sharedHold           // a shared gate's admission (then res and dres are nil)
	mu       sync.Mutex
	released bool
}

// Reserve admits a call whose cost is known only afterwards (LLM tokens,
// bytes): it takes estimate tokens and an in-flight slot, waiting as Do
// does, and returns a ticket. Settle the ticket with the actual cost and
// Release it when the call has finished.
func (g *Gate) Reserve(ctx context.Context, estimate int64, opts ...Option) (*Ticket, error) {
	attempt := 1
	for _, f := range opts {
		var o callOpts
		f(&o)
		attempt = max(attempt, o.attempt)
	}
	ch, err := g.charges(opts, true)
	if err == nil {
		ctx, err = g.classed(ctx, opts)
	}
	if err != nil {
		g.reject(err, costReason(err), estimate, attempt, 0)
		return nil, err
	}
	h, err := g.acquire(ctx, estimate, attempt, true, ch)
	if err != nil {
		return nil, err
	}
	return &Ticket{g: g, res: h.res, dres: h.dres, sh: h.sh}, nil
}

// SettleCharge settles the ticket's charge in dimension name with the
// actual cost, as Settle does for Limit (the unused part back exactly, an
// excess charged into debt); once per dimension, before Release. An
// unknown name is an error matching sluice.ErrInvalidCost.
func (t *Ticket) SettleCharge(name string, actual int64) error {
	for i, d := range t.g.dims {
		if d.name != name {
			continue
		}
		if t.sh != nil {
			return t.sh.settle(i+1, actual)
		}
		if i < len(t.dres) {
			return t.dres[i].Settle(actual)
		}
	}
	return sluice.Errorf(sluice.ErrInvalidCost, "gate %q has no dimension %q", t.g.name, name)
}

// charges resolves a call's options into a cost per dimension (nil when
// the gate has none, or, unless all is set, when none is charged).
func (g *Gate) charges(opts []Option, all bool) ([]int64, error) {
	if len(opts) == 0 && (!all || len(g.dims) == 0) {
		return nil, nil
	}
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	if len(o.charges) == 0 && (!all || len(g.dims) == 0) {
		return nil, nil
	}
	ch := make([]int64, len(g.dims))
	n := 0
	for i, d := range g.dims {
		if c, ok := o.charges[d.name]; ok {
			if err := bucket.CheckCost(c, d.limit.Capacity); err != nil {
				return nil, fmt.Errorf("%q: dimension %q: %w", g.name, d.name, err)
			}
			ch[i], n = c, n+1
		}
	}
	if n < len(o.charges) {
		for name := range o.charges {
			if !g.hasDim(name) {
				return nil, sluice.Errorf(sluice.ErrInvalidCost, "gate %q has no dimension %q", g.name, name)
			}
		}
	}
	return ch, nil
}

func (g *Gate) hasDim(name string) bool {
	for _, d := range g.dims {
		if d.name == name {
			return true
		}
	}
	return false
}

// costReason is the refusal reason of a cost error.
func costReason(err error) string {
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		return ReasonCostExceedsCapacity
	}
	return ReasonInvalidCost
}

// Settle replaces the estimate by the actual cost: the unused part goes
// back to the bucket exactly, an excess is charged at once (pushing the
// bucket into debt, so later callers wait). It can be called once; a
// negative actual returns an error matching sluice.ErrInvalidCost and
// changes nothing.
func (t *Ticket) Settle(actual int64) error {
	if t.sh != nil {
		return t.sh.settle(0, actual)
	}
	return t.res.Settle(actual)
}

// Release frees the ticket's in-flight slot. It is idempotent. Tokens not
// settled stay taken at the estimate.
func (t *Ticket) Release() {
	t.mu.Lock()
	done := t.released
	t.released = true
	t.mu.Unlock()
	if !done {
		t.g.releaseHold(hold{sh: t.sh})
	}
}
