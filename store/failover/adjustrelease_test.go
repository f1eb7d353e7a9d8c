package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/failover"
)

// AdjustRelease while Redis is down, in local mode: a slot and tokens
// taken locally are settled and freed locally in one call; a slot taken
// on Redis before the outage is not released (store.ErrUnavailable, as
// Release), the local adjustments still applied.
func TestAdjustReleaseDegraded(t *testing.T) {
	r := newRig(t, failover.Local, 1)
	sp := spec(t, 10, 0.001, "")
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: time.Minute}
	ctx := context.Background()
	onRedis, err := take(t, r.fs, store.Item{Key: "c2", Spec: conc, Cost: 1})
	if err != nil || !onRedis.Allowed {
		t.Fatalf("a slot on Redis: %+v %v", onRedis, err)
	}
	r.srv.Kill()
	items := []store.Item{{Key: "k", Spec: sp, Cost: 8}, {Key: "c", Spec: conc, Cost: 1}}
	res, err := r.fs.Take(ctx, items)
	if err != nil || !res.Allowed {
		t.Fatalf("local take: %+v %v", res, err)
	}
	if again, _ := take(t, r.fs, store.Item{Key: "c", Spec: conc, Cost: 1}); again.Allowed {
		t.Fatal("one local slot, held")
	}
	settle := []store.Adjustment{{Key: "k", Spec: sp, Delta: -6, RefundBefore: items[0].RefundBefore}}
	if err := r.fs.AdjustRelease(ctx, settle, res.Slots); err != nil {
		t.Fatalf("rule: a local settle and release while degraded: %v", err)
	}
	if got, _ := take(t, r.fs, store.Item{Key: "c", Spec: conc, Cost: 1}); !got.Allowed {
		t.Fatal("rule: AdjustRelease frees a local slot locally")
	}
	if got, _ := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 8}); !got.Allowed {
		t.Fatalf("rule: AdjustRelease returns locally taken tokens (8 taken, 6 back: 8 left): %+v", got)
	}
	if err := r.fs.AdjustRelease(ctx, nil, onRedis.Slots); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("rule: a slot held on Redis is not released while degraded (as Release): %v", err)
	}
}
