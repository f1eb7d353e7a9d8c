// The conformance case of store.AdjustRelease: a settle and a release in
// one call.

package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// AdjustRelease (store.AdjustRelease: one call on a store.AdjustReleaser)
// applies its adjustments as Adjust does and frees the slots as Release
// does, in any combination: both, adjustments only, slots only; a slot
// released twice is freed once, and a ceiling that lowers nothing changes
// nothing.
func testAdjustRelease(t *testing.T, f Factory) {
	s, c := open(t, f)
	ctx := context.Background()
	sp := spec(t, 10, 1)
	slots := &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: time.Minute}
	items := []store.Item{{Key: "t", Spec: sp, Cost: 8}, {Key: "f", Spec: slots, Cost: 1}}
	r, err := s.Take(ctx, items)
	if err != nil || !r.Allowed || r.Slots.ID == "" {
		t.Fatalf("8 tokens and a slot: %+v %v", r, err)
	}
	// The call used 3: 5 back, the slot freed, and a ceiling above what
	// the bucket holds, all in one call.
	settle := []store.Adjustment{
		{Key: "t", Spec: sp, Delta: -5, RefundBefore: items[0].RefundBefore},
		{Key: "t", Spec: sp, Lower: true, Delta: 9},
	}
	if err := store.AdjustRelease(ctx, s, settle, r.Slots); err != nil {
		t.Fatal(err)
	}
	if d := take(t, s, store.Item{Key: "t", Spec: sp}).Decisions[0]; d.Remaining != 7 {
		t.Fatalf("rule: AdjustRelease returns what Adjust would (8 taken, 5 back: 7 left; a ceiling of 9 lowers nothing): %+v", d)
	}
	r2 := take(t, s, store.Item{Key: "f", Spec: slots, Cost: 1})
	if !r2.Allowed {
		t.Fatalf("rule: AdjustRelease frees the slot as Release would: %+v", r2)
	}
	// Twice: the slot of r is freed once (r2's stays held).
	if err := store.AdjustRelease(ctx, s, nil, r.Slots); err != nil {
		t.Fatalf("rule: releasing a slot freed already is not an error: %v", err)
	}
	if r3 := take(t, s, store.Item{Key: "f", Spec: slots, Cost: 1}); r3.Allowed {
		t.Fatalf("rule: a slot released twice frees one slot: %+v", r3)
	}
	// Slots only, then adjustments only.
	if err := store.AdjustRelease(ctx, s, nil, r2.Slots); err != nil {
		t.Fatal(err)
	}
	if r4 := take(t, s, store.Item{Key: "f", Spec: slots, Cost: 1}); !r4.Allowed {
		t.Fatalf("rule: AdjustRelease without adjustments is Release: %+v", r4)
	}
	c.Advance(time.Second)
	if err := store.AdjustRelease(ctx, s, []store.Adjustment{{Key: "t", Spec: sp, Lower: true, Delta: 2}}, store.Slots{}); err != nil {
		t.Fatal(err)
	}
	if d := take(t, s, store.Item{Key: "t", Spec: sp}).Decisions[0]; d.Remaining != 2 {
		t.Fatalf("rule: AdjustRelease without slots is Adjust (a ceiling of 2: 2 left): %+v", d)
	}
}
