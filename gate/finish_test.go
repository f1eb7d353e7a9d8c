package gate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// callCounter counts a shared gate's store calls by operation.
type callCounter struct {
	store.Store
	takes, adjusts, releases, both atomic.Int64
}

func (s *callCounter) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	s.takes.Add(1)
	return s.Store.Take(ctx, items)
}

func (s *callCounter) Adjust(ctx context.Context, adj []store.Adjustment) error {
	s.adjusts.Add(1)
	return s.Store.Adjust(ctx, adj)
}

func (s *callCounter) Release(ctx context.Context, slots store.Slots) error {
	s.releases.Add(1)
	return s.Store.Release(ctx, slots)
}

func (s *callCounter) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	s.both.Add(1)
	return store.AdjustRelease(ctx, s.Store, adj, slots)
}

func (s *callCounter) CanRenew() bool { return store.CanRenew(s.Store) }

func (s *callCounter) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	return store.Renew(ctx, s.Store, slots, ttl)
}

// Finish settles, lowers to a provider's counts and releases a shared
// gate's ticket in one store call (the booking was the other): the
// unused estimate back and the ceilings applied for every gate of the
// name, the slot free; bad input changes nothing.
func TestSharedFinishOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &callCounter{Store: memstore.New()}
		defer st.Close()
		cfg := gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 0.001}, MaxInFlight: 1, MaxQueue: 1, MaxWait: time.Millisecond,
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 0.001}}}}
		a, b := slowGate(t, st, cfg), slowGate(t, st, cfg)
		ctx := context.Background()
		tk, err := a.Reserve(ctx, 1, gate.Charge("tokens", 900))
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Finish(map[string]int64{"images": 1}, nil); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Fatalf("rule: an unknown name is an error: %v", err)
		}
		if err := tk.Finish(map[string]int64{"tokens": -1}, nil); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Fatalf("rule: a negative cost is an error: %v", err)
		}
		if a.Stats().InFlight != 1 {
			t.Fatal("rule: a refused Finish changes nothing (the ticket is held)")
		}
		// 300 used (600 back), and the provider counts 5 requests and 350
		// tokens left: one call for all of it and the slot.
		err = tk.Finish(map[string]int64{"tokens": 300}, []gate.Ceiling{{Dimension: "requests", Remaining: 5}, {Dimension: "tokens", Remaining: 350}, {Dimension: "images", Remaining: 0}})
		if err != nil {
			t.Fatal(err)
		}
		if n, o := st.both.Load(), st.adjusts.Load()+st.releases.Load(); n != 1 || o != 0 || st.takes.Load() != 1 {
			t.Fatalf("rule: a booking and a Finish are 2 store calls: %d takes, %d AdjustRelease, %d other", st.takes.Load(), n, o)
		}
		if a.Stats().InFlight != 0 {
			t.Fatal("rule: Finish releases the ticket")
		}
		tk.Release() // (after Finish: nothing more)
		if st.releases.Load() != 0 || st.both.Load() != 1 {
			t.Fatal("rule: a Release after Finish sends nothing")
		}
		if err := tk.Finish(map[string]int64{"tokens": 1}, nil); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Fatalf("rule: a budget settles once: %v", err)
		}
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 351)); !errors.Is(err, sluice.ErrQueueFull) && !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("rule: tokens at most the provider's 350 for every gate of the name: %v", err)
		}
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 350)); err != nil {
			t.Fatalf("rule: the slot is free and 350 tokens are left: %v", err)
		}
		for i := range 5 {
			err := b.Do(ctx, 1, nop)
			if (i < 4) != (err == nil) {
				t.Fatalf("rule: requests lowered to 5 (1 taken since): request %d: %v", i, err)
			}
		}
	})
}

// Finish on a gate in process settles, lowers and releases as Settle,
// LowerAll and Release would.
func TestFinishInProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := gate.New(gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 0.001}, MaxInFlight: 1,
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 0.001}}}})
		if err != nil {
			t.Fatal(err)
		}
		tk, err := g.Reserve(context.Background(), 2, gate.Charge("tokens", 500))
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Finish(map[string]int64{"requests": 1, "tokens": 100}, []gate.Ceiling{{Dimension: "tokens", Remaining: 800}}); err != nil {
			t.Fatal(err)
		}
		s := g.Stats()
		if s.InFlight != 0 || s.Tokens < 8.99 || s.Tokens > 9.01 || s.Dimensions[0].Tokens < 799.9 || s.Dimensions[0].Tokens > 800.1 {
			t.Fatalf("rule: settled (9 requests, 900 tokens), lowered (800 tokens) and released: %+v", s)
		}
	})
}
