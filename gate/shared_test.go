package gate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// sharedPair returns two gates of one name on one store: two workers (two
// processes, as far as the gates can tell) sharing one budget.
func sharedPair(t *testing.T, cfg gate.Config) (*gate.Gate, *gate.Gate, store.Store) {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	cfg.Store = st
	if cfg.Name == "" {
		cfg.Name = "llm"
	}
	a, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, b, st
}

var nop = func(context.Context) error { return nil }

// Two gates of one name on one store spend one budget.
func TestSharedBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}})
		ctx := context.Background()
		if err := a.Do(ctx, 6, nop); err != nil {
			t.Fatal(err)
		}
		if err := b.Do(ctx, 5, nop); !errors.Is(err, sluice.ErrQueueFull) {
			t.Fatalf("rule: a shared gate's budget is spent by every gate of its name: 6 of 10 taken, 5 more must wait (MaxQueue 0: refused), got %v", err)
		}
		if err := b.Do(ctx, 4, nop); err != nil {
			t.Fatalf("the 4 left: %v", err)
		}
		// Another name on the same store is another budget.
		c, _ := gate.New(gate.Config{Name: "other", Limit: bucket.Limit{Capacity: 10, Rate: 1}, Store: a.Config().Store})
		if err := c.Do(ctx, 10, nop); err != nil {
			t.Fatalf("rule: gates of other names do not share: %v", err)
		}
	})
}

// Waiters of two gates are admitted in their order of arrival at the
// store, a large cost included, each after one store decision and a local
// sleep.
func TestSharedFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 10}, MaxQueue: 10, MaxWait: time.Minute})
		ctx := context.Background()
		start := time.Now()
		if err := a.Do(ctx, 10, nop); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []string
		var wg sync.WaitGroup
		call := func(g *gate.Gate, name string, cost int64) {
			wg.Go(func() {
				if err := g.Do(ctx, cost, nop); err != nil {
					t.Error(name, err)
				}
				mu.Lock()
				order = append(order, name+"@"+time.Since(start).String())
				mu.Unlock()
			})
			synctest.Wait() // booked before the next one arrives
		}
		call(a, "a-big", 10)  // due at 1 s
		call(b, "b-small", 1) // due at 1.1 s: behind the big one
		call(a, "a-small", 1) // 1.2 s
		wg.Wait()
		want := []string{"a-big@1s", "b-small@1.1s", "a-small@1.2s"}
		if len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
			t.Fatalf("rule: shared waiters go first come first served, at their booked times: %v, want %v", order, want)
		}
	})
}

// A waiter that gives up returns its booking exactly: the next caller,
// through another gate, gets the tokens at the time it would have had
// without the waiter.
func TestSharedCancelReturnsTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 10}, MaxQueue: 10, MaxWait: time.Minute})
		start := time.Now()
		a.Do(context.Background(), 10, nop)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- a.Do(ctx, 10, nop) }() // booked to 1 s
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
		if err := b.Do(context.Background(), 5, nop); err != nil || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("rule: a cancelled booking returns its tokens exactly: the next 5 are due at 0.5 s, got %v at %v", err, time.Since(start))
		}
		if s := a.Stats(); s.Canceled != 1 {
			t.Fatalf("counted: %+v", s)
		}
	})
}

// A server hint seen by one gate pauses the others: their next calls wait
// the pause out, and the bucket restarts empty.
func TestSharedPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 10}, MaxQueue: 10, MaxWait: time.Minute})
		start := time.Now()
		a.Pause(2 * time.Second)
		if err := b.Do(context.Background(), 1, nop); err != nil || time.Since(start) != 2100*time.Millisecond {
			t.Fatalf("rule: a pause reaches every gate of the name, the bucket restarting empty (1 token at 2.1 s): %v at %v", err, time.Since(start))
		}
		short, _ := gate.New(gate.Config{Name: "llm", Limit: bucket.Limit{Capacity: 10, Rate: 10}, MaxQueue: 10, MaxWait: time.Second, Store: a.Config().Store})
		a.Pause(5 * time.Second)
		if err := short.Do(context.Background(), 1, nop); !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("rule: a pause longer than MaxWait refuses at once: %v", err)
		}
	})
}

// Dimensions are shared and all or nothing; SettleCharge returns the
// unused estimate to every gate of the name.
func TestSharedDimensions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := gate.Config{Limit: bucket.PerSecond(100), MaxQueue: 10, MaxWait: time.Minute,
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 100}}}}
		a, b, _ := sharedPair(t, cfg)
		ctx := context.Background()
		start := time.Now()
		tk, err := a.Reserve(ctx, 1, gate.Charge("tokens", 900))
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.SettleCharge("tokens", 300); err != nil { // 600 back
			t.Fatal(err)
		}
		if err := tk.SettleCharge("tokens", 300); err == nil {
			t.Fatal("rule: a dimension settles once")
		}
		tk.Release()
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 700)); err != nil || time.Since(start) != 0 {
			t.Fatalf("rule: a settled estimate's unused part is back for every gate (700 of 1000-300): %v at %v", err, time.Since(start))
		}
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 100)); err != nil || time.Since(start) != time.Second {
			t.Fatalf("rule: a call waits until every dimension has its cost (100 tokens at 1 s): %v at %v", err, time.Since(start))
		}
		if err := a.Do(ctx, 1, nop, gate.Charge("nope", 1)); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Fatalf("unknown dimension: %v", err)
		}
	})
}

// In-flight slots are the store's leases: shared, handed on when released
// (in this process at once, from another after a short poll), renewed while
// a call runs, and back after LeaseTTL when their holder stops renewing.
func TestSharedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := gate.Config{Limit: bucket.PerSecond(1000), MaxInFlight: 1, MaxQueue: 10, MaxWait: time.Hour, LeaseTTL: 3 * time.Second}
		a, b, st := sharedPair(t, cfg)
		ctx := context.Background()
		start := time.Now()
		tk, err := a.Reserve(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Duration, 1)
		go func() {
			if err := b.Do(ctx, 1, nop); err != nil {
				t.Error(err)
			}
			got <- time.Since(start)
		}()
		time.Sleep(10 * time.Second) // more than 3 TTLs: the slot is renewed
		select {
		case d := <-got:
			t.Fatalf("rule: a held slot is renewed past its TTL; the other gate got it at %v", d)
		default:
		}
		if s := a.Stats(); s.InFlight != 1 {
			t.Fatalf("in flight: %+v", s)
		}
		tk.Release()
		if d := <-got; d < 10*time.Second || d > 10*time.Second+60*time.Millisecond {
			t.Fatalf("rule: a released slot reaches a waiter of another gate within a poll (<= 50 ms): at %v", d)
		}
		// A crashed holder: a slot taken and never renewed nor released.
		items := []store.Item{{Key: "gate:{llm}:in_flight", Spec: &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, LeaseTTL: 3 * time.Second}, Cost: 1}}
		if r, err := st.Take(ctx, items); err != nil || !r.Allowed {
			t.Fatalf("the slot's key is gate:{NAME}:in_flight: %+v %v", r, err)
		}
		t0 := time.Now()
		if err := b.Do(ctx, 1, nop); err != nil || time.Since(t0) < 3*time.Second || time.Since(t0) > 3*time.Second+60*time.Millisecond {
			t.Fatalf("rule: a crashed worker's slot returns after LeaseTTL (3 s): %v after %v", err, time.Since(t0))
		}
	})
}

// MaxQueue bounds the waiters of one process (one gate), not of the name.
func TestSharedMaxQueuePerProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 1, Rate: 1}, MaxQueue: 1, MaxWait: time.Minute})
		ctx := context.Background()
		a.Do(ctx, 1, nop)
		var wg sync.WaitGroup
		wg.Go(func() { a.Do(ctx, 1, nop) })
		synctest.Wait()
		if q := a.Stats().Queued; q != 1 {
			t.Fatalf("Stats.Queued counts this process's waiter: %d", q)
		}
		if err := a.Do(ctx, 1, nop); !errors.Is(err, sluice.ErrQueueFull) {
			t.Fatalf("rule: MaxQueue 1 refuses this process's second waiter: %v", err)
		}
		start := time.Now()
		if err := b.Do(ctx, 1, nop); err != nil || time.Since(start) != 2*time.Second {
			t.Fatalf("rule: another process's gate has its own MaxQueue and waits in the same line (2 s): %v after %v", err, time.Since(start))
		}
		wg.Wait()
		if s := a.Stats(); s.RejectedQueueFull != 1 || s.Admitted != 2 {
			t.Fatalf("counts: %+v", s)
		}
	})
}

// Lower brings the shared budget down to the provider's figure for every
// gate, and never raises it.
func TestSharedLower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1},
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 1}}}}
		a, b, _ := sharedPair(t, cfg)
		ctx := context.Background()
		a.Lower("tokens", 200)
		a.Lower("tokens", 900) // never raised
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 201)); !errors.Is(err, sluice.ErrQueueFull) {
			t.Fatalf("rule: a lowered budget holds the provider's 200: %v", err)
		}
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 200)); err != nil {
			t.Fatal(err)
		}
		a.Lower("requests", 3)
		for i := range 4 {
			err := b.Do(ctx, 1, nop)
			if (i < 3) != (err == nil) {
				t.Fatalf("rule: lowered to 3 requests, 3 pass: request %d: %v", i, err)
			}
		}
	})
}

// Config errors of a shared gate name the field; nothing is made.
func TestSharedConfigErrors(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	for _, cfg := range []gate.Config{
		{Limit: bucket.PerSecond(1), Store: st, StartEmpty: true},
		{Limit: bucket.PerSecond(1), Store: st, LeaseTTL: -time.Second, MaxInFlight: 1},
		{Limit: bucket.PerSecond(1), Store: noRenew{st}, MaxInFlight: 1},
	} {
		if g, err := gate.New(cfg); err == nil || g != nil || !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := gate.New(gate.Config{Limit: bucket.PerSecond(1), Store: noRenew{st}}); err != nil {
		t.Errorf("a store without Renewer serves a gate without MaxInFlight: %v", err)
	}
}

// noRenew hides a store's Renewer.
type noRenew struct{ store.Store }
