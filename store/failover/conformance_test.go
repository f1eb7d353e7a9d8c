package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

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

// A primary that cannot renew leases: failover says so (store.CanRenew),
// and a Renew is an error that is not an outage.
func TestCannotRenewIsNotAnOutage(t *testing.T) {
	s, err := failover.New(failover.Config{Primary: noRenew{memstore.New()}, Mode: failover.Local})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if store.CanRenew(s) {
		t.Fatal("rule: failover over a primary without Renewer cannot renew")
	}
	if !store.CanRenew(memstore.New()) {
		t.Fatal("memstore renews")
	}
	err = s.Renew(context.Background(), store.Slots{ID: "x", Keys: []string{"k"}}, time.Second)
	if !errors.Is(err, store.ErrCannotRenew) || s.Degraded() {
		t.Fatalf("rule: ErrCannotRenew, and the store stays healthy: %v, degraded %v", err, s.Degraded())
	}
}

// noRenew hides a store's Renewer.
type noRenew struct{ store.Store }
