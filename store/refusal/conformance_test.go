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

// Every case applies but one: an answer from the cache is the store's
// decision at that moment, field by field, except that under a rate whose
// token is not a whole number of nanoseconds (the pure model's case has
// 3 a second) a RetryAfter the cache tells may be the earlier of the two
// the store's rounding allows, a nanosecond short (TestSameAnswersAsTheStore
// counts them, and checks everything else).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store {
		return refusal.New(memstore.New(memstore.WithClock(c)), 1000, refusal.WithClock(c))
	}, storetest.Skip("IdenticalToPureModel", "under a rate whose token is a fraction of a nanosecond, a cached RetryAfter may be 1 ns short of the store's"))
}
