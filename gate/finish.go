// Ticket.Finish: a ticket's settles, its provider's ceilings and its
// release in one step (one store call for a shared gate).

package gate

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Finish ends the ticket in one step: it settles each budget named in
// actual with its actual cost (by name: "requests", or "", for Limit,
// else a Config.Dimensions name; as Settle and SettleCharge do, each
// budget once), lowers the budgets to the ceilings cs (a provider's own
// counts, as LowerAll does: never raised, unknown dimensions skipped), and
// releases the ticket (as Release does). A shared gate sends all of it to
// the store in one call (store.AdjustRelease: one script call on Redis)
// where Settle, LowerAll and Release would make three: the settles first,
// then the ceilings (a provider's count already includes this call's
// actual cost), and the slot freed in the same call; a ceiling at or above
// its budget's capacity, which cannot lower anything, is not sent.
//
// A negative cost, an unknown name, Limit named twice ("" and
// "requests") or, for a shared gate, a budget settled already is an
// error matching sluice.ErrInvalidCost and changes nothing (the ticket is
// not released); in process a budget settled already is Settle's error,
// the rest applied. A store error is returned once the ticket is
// released: its settles may be tried again (Settle, SettleCharge), and its
// slot returns at its SlotTTL if the store did not free it.
func (t *Ticket) Finish(actual map[string]int64, cs []Ceiling) error {
	costs := make([]int64, len(t.g.dims)+1)
	named := make([]bool, len(t.g.dims)+1)
	for name, c := range actual {
		i := 0
		if name != "" && name != "requests" {
			if !t.g.hasDim(name) {
				return sluice.Errorf(sluice.ErrInvalidCost, "gate %q has no dimension %q", t.g.name, name)
			}
			i = t.g.budgetIndex(name)
		}
		switch {
		case named[i]:
			return sluice.Errorf(sluice.ErrInvalidCost, "gate %q: Limit named twice (\"\" and \"requests\")", t.g.name)
		case c < 0:
			return sluice.Errorf(sluice.ErrInvalidCost, "gate %q: actual cost %d for %s is negative", t.g.name, c, t.g.budgetName(i))
		}
		named[i], costs[i] = true, c
	}
	var idx []int // the budgets settled, in Config order
	for i, ok := range named {
		if ok {
			idx = append(idx, i)
		}
	}
	if t.sh != nil {
		if err := t.sh.claim(idx); err != nil {
			return err
		}
	}
	t.mu.Lock()
	done := t.released
	t.released = true
	t.mu.Unlock()
	if t.sh == nil {
		return t.finishLocal(idx, costs, cs, done)
	}
	return t.sh.finish(idx, costs, cs, !done)
}

// finishLocal is Finish for a gate in process.
func (t *Ticket) finishLocal(idx []int, costs []int64, cs []Ceiling, released bool) error {
	var err error
	for _, i := range idx {
		var e error
		switch {
		case i == 0:
			e = t.res.Settle(costs[i])
		case i-1 < len(t.dres):
			e = t.dres[i-1].Settle(costs[i])
		}
		if e != nil && err == nil {
			err = fmt.Errorf("gate %q: settle %s: %w", t.g.name, t.g.budgetName(i), e)
		}
	}
	if len(cs) > 0 {
		t.g.LowerAll(cs)
	}
	if !released {
		t.g.releaseHold(hold{})
	}
	return err
}

// claim marks budgets idx as being settled, or changes nothing and
// returns an error when one was settled already (or is being settled).
func (h *sharedHold) claim(idx []int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range idx {
		if h.settled[i] != 0 {
			return sluice.Errorf(sluice.ErrInvalidCost, "gate %q: %s already settled", h.g.name, h.g.budgetName(i))
		}
	}
	for _, i := range idx {
		h.settled[i] = 1
	}
	return nil
}

// finish settles the claimed budgets idx with costs (per budget), lowers
// to cs and, when release is set, frees the hold's slot, in one store
// call.
func (h *sharedHold) finish(idx []int, costs []int64, cs []Ceiling, release bool) error {
	g, sh := h.g, h.g.sh
	adj := make([]store.Adjustment, 0, len(idx)+len(cs))
	for _, i := range idx {
		if delta := costs[i] - h.costs[i]; delta != 0 {
			adj = append(adj, store.Adjustment{Key: sh.keys[i], Spec: sh.specs[i], Delta: delta, RefundBefore: h.before[i]})
		}
	}
	var lowered []int
	for _, c := range cs {
		if g.bucketOf(c.Dimension) == nil {
			continue
		}
		i := g.budgetIndex(c.Dimension)
		if c.Remaining >= sh.specs[i].Capacity() {
			continue
		}
		adj = append(adj, store.Adjustment{Key: sh.keys[i], Spec: sh.specs[i], Lower: true, Delta: max(c.Remaining, 0)})
		lowered = append(lowered, i)
	}
	var slots store.Slots
	if release && h.stop() {
		g.inFlight.Add(-1)
		slots = h.slots
	} else {
		release = false
	}
	var err error
	sh.ad.rebase(sh, adj)
	if len(adj) > 0 || slots.ID != "" {
		err = store.AdjustRelease(context.Background(), sh.st, adj, slots)
	}
	if release && slots.ID != "" {
		select {
		case sh.freed <- struct{}{}:
		default:
		}
	}
	h.mu.Lock()
	for _, i := range idx {
		h.settled[i] = 2
		if err != nil {
			h.settled[i] = 0
		}
	}
	h.mu.Unlock()
	if err != nil {
		names := make([]string, 0, len(idx)+len(lowered))
		for _, i := range append(idx, lowered...) {
			names = append(names, g.budgetName(i))
		}
		return fmt.Errorf("gate %q: finish (%s): %w", g.name, strings.Join(names, ", "), err)
	}
	for k, i := range lowered {
		a := adj[len(adj)-len(lowered)+k]
		sh.last[i].Store(min(sh.last[i].Load(), a.Delta))
	}
	return nil
}
