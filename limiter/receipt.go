// Receipts: what an admitted check took, and Settle, which corrects it.

package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Receipt records what an admitted Check took from each limit, so that
// Settle can correct it once the real cost is known. The zero Receipt
// records nothing.
type Receipt struct {
	taken  []store.Adjustment // Delta holds the cost taken
	limits []string           // the limit of each
	// settled is shared by the receipt's copies: a receipt settles once
	// (nil: the zero Receipt, which records nothing).
	settled *atomic.Bool
}

// ErrSettled is returned by Settle and SettleCosts for a receipt (or a
// copy of it) settled already: settling twice would return its cost
// twice.
var ErrSettled = errors.New("limiter: receipt settled already")

// Empty reports whether the receipt records nothing.
func (r Receipt) Empty() bool { return len(r.taken) == 0 }

type receiptEntry struct {
	Limit        string `json:"limit"`
	Key          string `json:"key"`
	Cost         int64  `json:"cost"`
	RefundBefore int64  `json:"refund_before"`
}

// MarshalBinary encodes the receipt (JSON), so that another process with
// the same policy can settle it (UnmarshalReceipt).
func (r Receipt) MarshalBinary() ([]byte, error) {
	out := make([]receiptEntry, len(r.taken))
	for i, t := range r.taken {
		out[i] = receiptEntry{Limit: r.limits[i], Key: t.Key, Cost: t.Delta, RefundBefore: t.RefundBefore}
	}
	return json.Marshal(out)
}

// UnmarshalReceipt decodes a receipt made by MarshalBinary or
// MarshalCompact against the policy in force: entries of limits it no
// longer has are dropped (their state is gone or no longer applies).
func (l *Limiter) UnmarshalReceipt(b []byte) (Receipt, error) {
	var in []receiptEntry
	var err error
	if len(b) > 0 && b[0] == compactVersion {
		in, err = decodeCompact(b[1:])
	} else {
		err = json.Unmarshal(b, &in)
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("limiter: bad receipt: %w", err)
	}
	c := l.compiled.Load()
	var r Receipt
	for _, e := range in {
		i := c.index(e.Limit)
		if i < 0 || e.Key == "" || e.Cost < 0 {
			continue
		}
		r.taken = append(r.taken, store.Adjustment{Key: e.Key, Spec: c.specs[i], Delta: e.Cost, RefundBefore: e.RefundBefore})
		r.limits = append(r.limits, e.Limit)
	}
	r.settled = new(atomic.Bool)
	return r, nil
}

// Settle replaces the cost an admitted request took (its receipt) by
// actual, once per receipt (ErrSettled after; a receipt decoded by
// UnmarshalReceipt is a new one, whose owner — the server's book —
// settles it once), for costs known only afterwards (LLM tokens, bytes): a smaller
// actual returns the difference to every limit it was taken from, exactly,
// as long as those tokens are not yet refilled (later, nothing is returned:
// a late refund never creates credit); a larger one takes the excess at
// once, pushing token buckets into debt so later requests wait — at most
// one capacity of debt (a bucket never holds fewer than -B tokens after a
// settle: bucket.Params.Charge), so that no actual cost, however large,
// locks a limit shared by others for longer than twice its refill time. A
// negative actual is sluice.ErrInvalidCost and changes nothing.
func (l *Limiter) Settle(ctx context.Context, r Receipt, actual int64) error {
	if actual < 0 {
		return sluice.Errorf(sluice.ErrInvalidCost, "actual cost %d is negative", actual)
	}
	return l.SettleCosts(ctx, r, actual, nil)
}

// KeepCost, as SettleCosts' actual, keeps what the limits not named in its
// actuals took.
const KeepCost int64 = -1

// SettleCosts is Settle with an actual cost per limit: each limit named in
// actuals (by name) settles with its own actual cost; the others with
// actual, or, when actual is KeepCost, keep what they took. A name that is
// not a limit of the receipt is a *UnknownLimitError, a negative cost
// sluice.ErrInvalidCost; both change nothing.
func (l *Limiter) SettleCosts(ctx context.Context, r Receipt, actual int64, actuals map[string]int64) error {
	return l.settle(ctx, r, actual, actuals, store.Slots{})
}

// settle is SettleCosts and, with slots, their release in the same store
// call (SettleRelease).
func (l *Limiter) settle(ctx context.Context, r Receipt, actual int64, actuals map[string]int64, slots store.Slots) error {
	if err := l.CheckSettleCosts(r, actual, actuals); err != nil {
		return err
	}
	if r.settled != nil && !r.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	adj := make([]store.Adjustment, 0, len(r.taken))
	for i, t := range r.taken {
		v, ok := actuals[r.limits[i]]
		if !ok {
			if actual == KeepCost {
				continue
			}
			v = actual
		}
		if t.Delta = v - t.Delta; t.Delta != 0 {
			adj = append(adj, t)
		}
	}
	var err error
	switch {
	case len(adj) == 0 && slots.ID == "":
		return nil
	case slots.ID == "":
		err = l.st.Adjust(ctx, adj)
	case len(adj) == 0:
		err = l.st.Release(ctx, slots)
	default:
		err = store.AdjustRelease(ctx, l.st, adj, slots)
	}
	if err != nil {
		if r.settled != nil {
			r.settled.Store(false) // not applied: it may be settled again
		}
		return fmt.Errorf("limiter: %w", err)
	}
	return nil
}

// CheckSettle reports what Settle(r, actual) would refuse without changing
// anything: a negative actual (sluice.ErrInvalidCost).
func (l *Limiter) CheckSettle(r Receipt, actual int64) error {
	if actual < 0 {
		return sluice.Errorf(sluice.ErrInvalidCost, "actual cost %d is negative", actual)
	}
	return l.CheckSettleCosts(r, actual, nil)
}

// CheckSettleCosts reports what SettleCosts would refuse without changing
// anything.
func (l *Limiter) CheckSettleCosts(r Receipt, actual int64, actuals map[string]int64) error {
	if r.settled != nil && r.settled.Load() {
		return ErrSettled
	}
	if actual < 0 && actual != KeepCost {
		return sluice.Errorf(sluice.ErrInvalidCost, "actual cost %d is negative", actual)
	}
	var unknown []string
	for n, v := range actuals {
		if v < 0 {
			return sluice.Errorf(sluice.ErrInvalidCost, "actual cost %d for limit %q is negative", v, n)
		}
		if !slices.Contains(r.limits, n) && !l.isShadow(n) { // (a shadow limit that refused took nothing: nothing to settle)
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return &UnknownLimitError{Name: unknown[0], Applicable: slices.Clone(r.limits)}
	}
	return nil
}

// isShadow reports whether name is a shadow limit of the policy in force.
func (l *Limiter) isShadow(name string) bool {
	c := l.compiled.Load()
	if i := c.index(name); i >= 0 {
		return c.shadow[i]
	}
	return false
}
