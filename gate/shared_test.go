package gate_test

import (
	"context"
	"errors"
	"sync"
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

// In-flight slots are held in the store: shared, handed on when released
// (in this process at once, from another after a short poll), renewed while
// a call runs, and back after SlotTTL when their holder stops renewing.
func TestSharedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := gate.Config{Limit: bucket.PerSecond(1000), MaxInFlight: 1, MaxQueue: 10, MaxWait: time.Hour, SlotTTL: 3 * time.Second}
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
		items := []store.Item{{Key: "gate:{llm}:in_flight", Spec: &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: 3 * time.Second}, Cost: 1}}
		if r, err := st.Take(ctx, items); err != nil || !r.Allowed {
			t.Fatalf("the slot's key is gate:{NAME}:in_flight: %+v %v", r, err)
		}
		t0 := time.Now()
		if err := b.Do(ctx, 1, nop); err != nil || time.Since(t0) < 3*time.Second || time.Since(t0) > 3*time.Second+60*time.Millisecond {
			t.Fatalf("rule: a crashed worker's slot returns after SlotTTL (3 s): %v after %v", err, time.Since(t0))
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
		{Limit: bucket.PerSecond(1), Store: st, SlotTTL: -time.Second, MaxInFlight: 1},
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

// slowStore answers every Take after a delay (a store round trip), and
// fails the next failAdjust Adjusts.
type slowStore struct {
	store.Store
	delay      time.Duration
	failAdjust atomic.Int64
}

func (s *slowStore) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	time.Sleep(s.delay)
	return s.Store.Take(ctx, items)
}

func (s *slowStore) Adjust(ctx context.Context, adj []store.Adjustment) error {
	if s.failAdjust.Add(-1) >= 0 {
		return errors.New("store down")
	}
	return s.Store.Adjust(ctx, adj)
}

func (s *slowStore) Renew(ctx context.Context, l store.Slots, ttl time.Duration) error {
	return store.Renew(ctx, s.Store, l, ttl)
}

func slowGate(t *testing.T, st store.Store, cfg gate.Config) *gate.Gate {
	t.Helper()
	cfg.Store = st
	if cfg.Name == "" {
		cfg.Name = "llm"
	}
	g, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A caller booked to wait longer than SlotTTL keeps its slot while it
// sleeps (the slot is renewed from the booking on).
func TestSharedSlotHeldWhileBooked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := gate.Config{Limit: bucket.Limit{Capacity: 1, Rate: 0.1}, MaxInFlight: 1, MaxQueue: 10, MaxWait: time.Minute, SlotTTL: 3 * time.Second}
		a, _, st := sharedPair(t, cfg)
		ctx := context.Background()
		a.Do(ctx, 1, nop) // the token; the next is due in 10 s
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := a.Do(ctx, 1, func(context.Context) error { time.Sleep(time.Second); return nil }); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		time.Sleep(5 * time.Second) // past the TTL, before its turn
		slot := []store.Item{{Key: "gate:{llm}:in_flight", Spec: &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: 3 * time.Second}}}
		if _, err := st.Take(ctx, slot); err != nil || slot[0].Decision.Remaining != 0 {
			t.Fatalf("rule: a booked caller holds its slot while it sleeps, past SlotTTL: %+v %v", slot[0].Decision, err)
		}
		wg.Wait()
	})
}

// A caller whose context ends during the store's round trip returns what
// the store booked for it: its tokens and its slot.
func TestSharedCancelDuringTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowStore{Store: memstore.New(), delay: time.Second}
		defer st.Close()
		cfg := gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 0.001}, MaxInFlight: 1, MaxQueue: 10, MaxWait: time.Minute}
		g := slowGate(t, st, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := g.Do(ctx, 10, nop); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled during the round trip: %v", err)
		}
		if s := g.Stats(); s.Canceled != 1 || s.RejectedStore != 0 {
			t.Fatalf("rule: counted as cancelled, not a store error: %+v", s)
		}
		if err := g.Do(context.Background(), 10, nop); err != nil {
			t.Fatalf("rule: the booking made for a caller that gave up during the round trip comes back, tokens and slot: %v", err)
		}
	})
}

// MaxQueue places are held only by callers that wait: one admitted at once
// does not make a real waiter fail, even while its round trip is on.
func TestSharedMaxQueueOnlyWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowStore{Store: memstore.New(), delay: 10 * time.Millisecond}
		defer st.Close()
		g := slowGate(t, st, gate.Config{Limit: bucket.Limit{Capacity: 1, Rate: 1}, MaxQueue: 1, MaxWait: time.Minute})
		ctx := context.Background()
		errs := make(chan error, 2)
		go func() { errs <- g.Do(ctx, 1, nop) }() // admitted at once
		go func() { errs <- g.Do(ctx, 1, nop) }() // must wait 1 s
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("rule: with MaxQueue 1, one caller passing at once and one waiting both pass: %v", err)
			}
		}
	})
}

// A call of cost 0 waits behind the line (and a pause) rather than being
// refused.
func TestSharedCostZeroWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 2, Rate: 2}, MaxQueue: 10, MaxWait: time.Minute})
		ctx := context.Background()
		start := time.Now()
		a.Do(ctx, 2, nop)
		go a.Do(ctx, 1, nop) // booked to 0.5 s
		synctest.Wait()
		if err := b.Do(ctx, 0, nop); err != nil || time.Since(start) < 500*time.Millisecond || time.Since(start) > 560*time.Millisecond {
			t.Fatalf("rule: a cost-0 call waits behind the line (0.5 s): %v at %v", err, time.Since(start))
		}
	})
}

// A settle whose store write failed can be tried again; one that
// succeeded cannot.
func TestSharedSettleRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowStore{Store: memstore.New()}
		defer st.Close()
		g := slowGate(t, st, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 0.001}})
		tk, err := g.Reserve(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		st.failAdjust.Store(1)
		if err := tk.Settle(4); err == nil {
			t.Fatal("the store failed: the settle fails")
		}
		if err := tk.Settle(4); err != nil {
			t.Fatalf("rule: a failed settle may be tried again: %v", err)
		}
		if err := tk.Settle(4); err == nil {
			t.Fatal("rule: a settle succeeds once")
		}
		tk.Release()
		if err := g.Do(context.Background(), 6, nop); err != nil {
			t.Fatalf("the settle returned 6: %v", err)
		}
	})
}

// A dimension paused by this process holds its own callers booked before
// the pause, as a gate-wide pause does.
func TestSharedDimensionPauseHoldsBooked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := gate.Config{Limit: bucket.PerSecond(100), MaxQueue: 10, MaxWait: time.Minute,
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 100, Rate: 100}}}}
		a, _, _ := sharedPair(t, cfg)
		ctx := context.Background()
		start := time.Now()
		a.Do(ctx, 1, nop, gate.Charge("tokens", 100))
		done := make(chan time.Duration, 1)
		go func() { a.Do(ctx, 1, nop, gate.Charge("tokens", 50)); done <- time.Since(start) }() // booked to 0.5 s
		synctest.Wait()
		a.PauseDimension("tokens", 3*time.Second)
		if d := <-done; d != 3*time.Second {
			t.Fatalf("rule: this process's booked caller waits for its own dimension pause (3 s): admitted at %v", d)
		}
	})
}

// Lower after a refund: the ceiling is applied in the store whatever this
// process saw last.
func TestSharedLowerAfterRefund(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := gate.Config{Limit: bucket.PerSecond(100),
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 0.001}}}}
		a, b, _ := sharedPair(t, cfg)
		ctx := context.Background()
		tk, _ := a.Reserve(ctx, 1, gate.Charge("tokens", 900))
		tk.SettleCharge("tokens", 0) // all 900 back: 1000 in the store
		tk.Release()
		a.Lower("tokens", 500)
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 501)); !errors.Is(err, sluice.ErrQueueFull) {
			t.Fatalf("rule: Lower caps the store's budget at the provider's figure, whatever this process saw: %v", err)
		}
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 500)); err != nil {
			t.Fatal(err)
		}
	})
}

// A gate with its own Clock measures its pauses on that clock: a clock an
// hour ahead of the system's pauses for the hint's length, not forever.
func TestSharedPauseOwnClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		defer st.Close()
		g := slowGate(t, st, gate.Config{Limit: bucket.PerSecond(10), MaxQueue: 10, MaxWait: 5 * time.Second, Clock: aheadClock{}})
		start := time.Now()
		g.Pause(time.Second)
		if err := g.Do(context.Background(), 1, nop); err != nil || time.Since(start) < time.Second || time.Since(start) > 1200*time.Millisecond {
			t.Fatalf("rule: a 1 s hint on the gate's clock pauses 1 s: %v after %v", err, time.Since(start))
		}
	})
}

type aheadClock struct{}

func (aheadClock) Now() time.Time { return time.Now().Add(time.Hour) }

// lateAnswerStore answers delay after it decides, counting booked waits
// from its answer (as store.Item.Wait allows: a shared store takes the
// answer's travel off the wait).
type lateAnswerStore struct {
	store.Store
	delay time.Duration
}

func (s *lateAnswerStore) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	r, err := s.Store.Take(ctx, items)
	time.Sleep(s.delay)
	r.Wait = max(r.Wait-s.delay, 0)
	for i := range items {
		items[i].Wait = max(items[i].Wait-s.delay, 0)
	}
	return r, err
}

// A booked call acts Wait after the store's answer arrives, not after it
// was asked: a store whose answer took time to come back is never acted
// on early.
func TestSharedWaitCountsFromTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &lateAnswerStore{Store: memstore.New(), delay: 30 * time.Millisecond}
		defer st.Close()
		g := slowGate(t, st, gate.Config{Limit: bucket.Limit{Capacity: 1, Rate: 10}, MaxQueue: 1, MaxWait: time.Second})
		ctx := context.Background()
		start := time.Now()
		if err := g.Do(ctx, 1, nop); err != nil { // decided at 0: empty, the next token at 100 ms
			t.Fatal(err)
		}
		var at time.Duration
		if err := g.Do(ctx, 1, func(context.Context) error { at = time.Since(start); return nil }); err != nil {
			t.Fatal(err)
		}
		// asked at 30 ms, decided then (its turn at 100 ms), answered at 60 ms with a wait of 40 ms
		if at != 100*time.Millisecond {
			t.Fatalf("rule: a booked call runs at its turn (100ms), got %v", at)
		}
	})
}

// adjustCounter counts Adjust calls (store round trips).
type adjustCounter struct {
	store.Store
	adjusts atomic.Int64
}

func (s *adjustCounter) Adjust(ctx context.Context, adj []store.Adjustment) error {
	s.adjusts.Add(1)
	return s.Store.Adjust(ctx, adj)
}

// LowerAll lowers every budget of one answer in one store call, each to
// its ceiling (never raised); unknown dimensions are reported and
// skipped; a ceiling at or above the capacity sends nothing.
func TestSharedLowerAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &adjustCounter{Store: memstore.New()}
		defer st.Close()
		cfg := gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1},
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1000, Rate: 1}}}}
		a, b := slowGate(t, st, cfg), slowGate(t, st, cfg)
		ctx := context.Background()
		unknown := a.LowerAll([]gate.Ceiling{{Dimension: "requests", Remaining: 3}, {Dimension: "images", Remaining: 1}, {Dimension: "tokens", Remaining: 200}})
		if len(unknown) != 1 || unknown[0] != "images" || st.adjusts.Load() != 1 {
			t.Fatalf("rule: one store call for the known budgets, the unknown reported: unknown %v, %d calls", unknown, st.adjusts.Load())
		}
		if a.LowerAll([]gate.Ceiling{{Dimension: "requests", Remaining: 10}, {Dimension: "tokens", Remaining: 5000}}) != nil || st.adjusts.Load() != 1 {
			t.Fatalf("rule: ceilings at or above the capacities lower nothing and send nothing: %d calls", st.adjusts.Load())
		}
		if err := b.Do(ctx, 1, nop, gate.Charge("tokens", 201)); !errors.Is(err, sluice.ErrQueueFull) {
			t.Fatalf("rule: tokens lowered to 200 for every gate of the name: %v", err)
		}
		for i := range 4 {
			err := b.Do(ctx, 1, nop, gate.Charge("tokens", 1))
			if (i < 3) != (err == nil) {
				t.Fatalf("rule: requests lowered to 3, 3 pass: request %d: %v", i, err)
			}
		}
	})
}
