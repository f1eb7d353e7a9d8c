package sluice_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

func TestErrorfMatchesKindAndKeepsMessage(t *testing.T) {
	err := sluice.Errorf(sluice.ErrCostExceedsCapacity, "cost %d exceeds capacity %d", 11, 10)
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("errors.Is failed for %v", err)
	}
	if errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("matched the wrong kind")
	}
	if got, want := err.Error(), "sluice: cost 11 exceeds capacity 10"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
