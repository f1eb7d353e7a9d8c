// AdjustReleaser: adjustments and the release of in-flight slots in one
// call (a settle and the end of the call it settles), and AdjustRelease,
// which falls back to Adjust then Release on other stores.

package store

import (
	"context"
	"errors"
)

// AdjustReleaser is implemented by stores that apply adjustments and free
// in-flight slots in one call — on a shared store one round trip where
// Adjust and Release take two: a call's settle (or its provider's
// ceilings) together with the release of its slot, say.
//
// AdjustRelease applies adj exactly as Adjust does and frees slots
// exactly as Release does (empty Slots free nothing, an unknown or expired
// slot is not an error; no adjustment adjusts nothing). A store that
// answers makes both take effect or, with an error, as Adjust and Release
// on their own would: a call that failed may be tried again (an
// adjustment applied twice counts twice, as Adjust's; a slot is freed
// once). Every store of this module implements it (store/memstore,
// store/redisstore in one script call per Redis Cluster hash slot,
// store/lease and store/failover for the store they wrap); a wrapper that
// does not is called through AdjustRelease, which then makes two calls.
type AdjustReleaser interface {
	AdjustRelease(ctx context.Context, adj []Adjustment, slots Slots) error
}

// AdjustRelease applies adj and frees slots on s: in one call when s is an
// AdjustReleaser, else Adjust (when adj holds anything) then Release (when
// slots name any), both tried whatever the first returned, their errors
// joined.
func AdjustRelease(ctx context.Context, s Store, adj []Adjustment, slots Slots) error {
	if ar, ok := s.(AdjustReleaser); ok {
		return ar.AdjustRelease(ctx, adj, slots)
	}
	var aerr, rerr error
	if len(adj) > 0 {
		aerr = s.Adjust(ctx, adj)
	}
	if slots.ID != "" {
		rerr = s.Release(ctx, slots)
	}
	return errors.Join(aerr, rerr)
}
