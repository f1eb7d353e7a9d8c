package gate_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/policy"
)

// A shared gate's classes: batch (reserve 0.5, never waits) stops at
// half the budget, on either gate of the name; interactive takes the
// rest and may wait; an unknown class takes nothing.
func TestSharedPriorities(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		classes := []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 500_000, QueueBounded: true}}
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}, MaxQueue: 10, MaxWait: time.Minute, Priorities: classes})
		ctx := context.Background()
		if err := a.Do(ctx, 5, nop, gate.Priority("batch")); err != nil {
			t.Fatalf("batch 5 of 10: %v", err)
		}
		if err := b.Do(ctx, 1, nop, gate.Priority("batch")); !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("batch 1 more (its reserve, and it never waits): %v", err)
		}
		if err := b.Do(ctx, 5, nop, gate.Priority("interactive")); err != nil {
			t.Fatalf("interactive takes the other 5: %v", err)
		}
		start := time.Now()
		if err := a.Do(ctx, 2, nop, gate.Priority("interactive")); err != nil || time.Since(start) != 2*time.Second {
			t.Fatalf("interactive waits for 2 tokens: %v after %v", err, time.Since(start))
		}
		if err := a.Do(ctx, 1, nop, gate.Priority("bulk")); !errors.Is(err, policy.ErrUnknownPriority) {
			t.Fatalf("unknown class: %v", err)
		}
	})
}
