// SettleRelease: a receipt settled and its request's in-flight slots
// freed in one store call.

package limiter

import (
	"context"

	"github.com/sluicehq/sluice/store"
)

// SettleRelease is SettleCosts followed by Release(slots), in one store
// call where the store can (store.AdjustRelease: one script call on
// Redis, where SettleCosts and Release make two): for a request that has
// finished and whose cost is now known. Its refusals are SettleCosts'
// (ErrSettled, a *UnknownLimitError, sluice.ErrInvalidCost), and they
// change nothing: the slots stay held. A store error leaves the receipt
// to be settled again; the slots then return at their TTL if the store
// did not free them (releasing them again is harmless).
func (l *Limiter) SettleRelease(ctx context.Context, r Receipt, actual int64, actuals map[string]int64, slots store.Slots) error {
	return l.settle(ctx, r, actual, actuals, slots)
}
