package failover_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// The failover wrapper is a store: with its primary up it passes the
// conformance suite, in every mode.
func TestConformance(t *testing.T) {
	for _, mode := range []string{"fail_open", "fail_closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store {
				s, err := failover.New(failover.Config{Primary: memstore.New(memstore.WithClock(c)), Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}
