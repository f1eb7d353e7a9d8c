package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// A take does not shorten the life of a slot set's key below its latest
// slot: a slot renewed for longer than the limit's slot TTL keeps its
// place when a later slot with the shorter TTL is taken (Redis's clock,
// key expiry on).
func TestTakeKeepsARenewedSlotsKeyAlive(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	sp := &store.Spec{Kind: store.Concurrency, MaxInFlight: 3, SlotTTL: 300 * time.Millisecond}
	it := store.Item{Key: "calls", Spec: sp, Cost: 1}
	long, err := s.Take(ctx, []store.Item{it})
	if err != nil || !long.Allowed {
		t.Fatal(long, err)
	}
	if err := s.Renew(ctx, long.Slots, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if short, err := s.Take(ctx, []store.Item{it}); err != nil || !short.Allowed {
		t.Fatal(short, err)
	}
	time.Sleep(800 * time.Millisecond) // the short slot (and its TTL) is over; the renewed one lives on
	peek := []store.Item{{Key: "calls", Spec: sp}}
	if _, err := s.Take(ctx, peek); err != nil {
		t.Fatal(err)
	}
	if live := sp.MaxInFlight - peek[0].Decision.Remaining; live != 1 {
		t.Fatalf("%d slots live after the short one expired, want 1 (the renewed one): the set's key expired with the shorter TTL", live)
	}
}
