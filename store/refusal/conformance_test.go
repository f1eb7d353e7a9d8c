// The refusal cache is a store: the conformance suite over a memstore, the
// cache on the suite's clock.

package refusal_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/refusal"
	"github.com/sluicehq/sluice/store/storetest"
)

// Every case applies, the pure model's too: an answer from the cache is
// the store's decision at that moment.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store {
		return refusal.New(memstore.New(memstore.WithClock(c)), 1000, refusal.WithClock(c))
	})
}
