// Leasing over the refusal cache (store/refusal), in sluice serve's order:
// the shared store, the cache, leasing.

package lease_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/refusal"
	"github.com/sluicehq/sluice/store/storetest"
)

// Leasing over the cache is still a store: the conformance suite, with
// the case leasing itself cannot apply left out (see TestConformance).
func TestConformanceOverRefusalCache(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store {
		return lease.New(refusal.New(memstore.New(memstore.WithClock(c)), 1000, refusal.WithClock(c)), lease.WithClock(c))
	}, storetest.Skip("IdenticalToPureModel", "leased decisions report the shared bucket at the last round trip"))
}
