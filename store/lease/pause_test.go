package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/memstore"
)

// A pause drops the tokens leased locally for its key; Stats().Leased
// ("tokens held locally now") must drop with them.
func TestPauseDropsLeasedCount(t *testing.T) {
	inner := memstore.New()
	s := lease.New(inner, lease.WithTTL(time.Minute), lease.WithTarget(10*time.Millisecond))
	defer s.Close()
	sp := spec(t, 100000, 100000)
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Second)
	for s.Stats().Leased == 0 && time.Now().Before(deadline) {
		items := []store.Item{{Key: "k", Spec: sp, Cost: 1}}
		if _, err := s.Take(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats().Leased
	if before == 0 {
		t.Fatal("no lease taken")
	}
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "k", Spec: sp, Pause: time.Second}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("leased before the pause %d, after %d", before, s.Stats().Leased)
	if got := s.Stats().Leased; got != 0 {
		t.Fatalf("Stats().Leased = %d after the pause dropped every local token (want 0)", got)
	}
}
