// AdjustRelease: adjustments and a release of slots in one call.

package memstore

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/store"
)

// AdjustRelease implements store.AdjustReleaser: Adjust then Release (in
// process, each as cheap as the other; a full store's error for a charge
// does not keep the slots from being freed).
func (s *Store) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	var aerr error
	if len(adj) > 0 {
		aerr = s.Adjust(ctx, adj)
	}
	return errors.Join(aerr, s.Release(ctx, slots))
}
