// SlotsTaker: a record's receipt and its in-flight slots handed out in
// the same calls, for a settle that frees them (/v1/settle "release").

package book

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/store"
)

// SlotsTaker is implemented by books that return a record's in-flight
// slots with its receipt: TakeReceiptSlots is TakeReceipt (the same
// guarantees and errors, in the calls TakeReceipt makes) that also returns
// the slots the record holds — empty when none — also along with
// ErrSettled, ErrDropped, ErrUnknown (a receipt past its window on a
// record that still holds its slots) or check's error, so that a settle
// refused for the receipt's state can still free them.
type SlotsTaker interface {
	TakeReceiptSlots(ctx context.Context, id string, check func([]byte) error) ([]byte, store.Slots, error)
}

// TakeReceiptSlots takes a record's receipt and returns its slots: in
// TakeReceipt's calls when b is a SlotsTaker (Memory, the Redis book and
// the failover book are), else Slots then TakeReceipt.
func TakeReceiptSlots(ctx context.Context, b Book, id string, check func([]byte) error) ([]byte, store.Slots, error) {
	if st, ok := b.(SlotsTaker); ok {
		return st.TakeReceiptSlots(ctx, id, check)
	}
	slots, err := b.Slots(ctx, id)
	if err != nil && !errors.Is(err, ErrUnknown) {
		return nil, store.Slots{}, err
	}
	rc, err := b.TakeReceipt(ctx, id, check)
	return rc, slots, err
}
