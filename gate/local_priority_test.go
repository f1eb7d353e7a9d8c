package gate_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/policy"
)

// The classes of vector P1 (docs/behaviour.md section 7.2).
var p1Classes = []policy.Priority{
	{Name: "interactive"},
	{Name: "standard", Reserve: 200_000, MaxQueue: 2 * time.Second, QueueBounded: true},
	{Name: "batch", Reserve: 500_000, QueueBounded: true},
}

// A gate in process applies the classes as a shared gate does (vector P1
// of docs/behaviour.md, B=10, r=1, every row at t=0 until row 9): batch
// stops at 5 and never waits, standard at 8 and books at most 2 s deep,
// interactive takes the rest and books as deep as its own wait; batch is
// admitted again at 7 s; an unknown class takes nothing.
func TestLocalPrioritiesVectorP1(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}, MaxQueue: 10, MaxWait: time.Minute, Priorities: p1Classes})
		start := time.Now()
		type result struct {
			row  int
			wait time.Duration
			err  error
		}
		waited := make(chan result, 10)
		do := func(row int, cost int64, class string, maxWait time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), maxWait)
			defer cancel()
			began := time.Now()
			err := g.Do(ctx, cost, noop, gate.Priority(class))
			waited <- result{row, time.Since(began), err}
		}
		rows := []struct {
			at      time.Duration
			cost    int64
			class   string
			maxWait time.Duration
			want    error
			wait    time.Duration
		}{
			{0, 5, "batch", time.Minute, nil, 0},
			{0, 1, "batch", time.Minute, sluice.ErrWaitTooLong, 0},
			{0, 3, "standard", time.Minute, nil, 0},
			{0, 1, "standard", 5 * time.Second, nil, time.Second},
			{0, 2, "standard", 5 * time.Second, sluice.ErrWaitTooLong, 0},
			{0, 1, "interactive", time.Minute, nil, 0},
			{0, 1, "interactive", 500 * time.Millisecond, sluice.ErrWaitTooLong, 0},
			{0, 1, "interactive", 3 * time.Second, nil, time.Second},
			{2 * time.Second, 1, "batch", time.Minute, sluice.ErrWaitTooLong, 0},
			{7 * time.Second, 1, "batch", time.Minute, nil, 0},
			{7 * time.Second, 1, "interactive", time.Minute, nil, 0},
		}
		pending := 0
		check := func(r result) {
			w := rows[r.row]
			if !errors.Is(r.err, w.want) || (r.err == nil) != (w.want == nil) || r.wait != w.wait {
				t.Errorf("row %d (%s %d): %v after %v, want %v after %v", r.row+1, w.class, w.cost, r.err, r.wait, w.want, w.wait)
			}
		}
		for i, r := range rows {
			time.Sleep(r.at - time.Since(start))
			go do(i, r.cost, r.class, r.maxWait)
			synctest.Wait() // decided, or waiting in the queue
			pending++
			for more := true; more; {
				select {
				case res := <-waited:
					check(res)
					pending--
				default:
					more = false
				}
			}
		}
		for ; pending > 0; pending-- {
			check(<-waited)
		}
		ctx := context.Background()
		if err := g.Do(ctx, 1, noop, gate.Priority("bulk")); !errors.Is(err, policy.ErrUnknownPriority) {
			t.Fatalf("unknown class: %v", err)
		}
		if _, err := g.Reserve(ctx, 1, gate.Priority("bulk")); !errors.Is(err, policy.ErrUnknownPriority) {
			t.Fatalf("unknown class (Reserve): %v", err)
		}
	})
}

// A call of a higher class passes a waiter of a lower class that must
// still wait (B=10, r=1, batch reserve 0.5 booking up to 5 s): batch's
// 2 tokens beyond its half are there for it in 2 s, while interactive,
// queued behind it, goes at once; and the bucket's line stays exact
// (nothing is admitted beyond B + r·t).
func TestLocalHigherClassPassesLowerWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		classes := []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 500_000, MaxQueue: 5 * time.Second, QueueBounded: true}}
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}, MaxQueue: 10, MaxWait: time.Minute, Priorities: classes})
		ctx := context.Background()
		if err := g.Do(ctx, 5, noop, gate.Priority("batch")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		batch := make(chan time.Duration, 1)
		go func() {
			if err := g.Do(ctx, 2, noop, gate.Priority("batch")); err != nil {
				t.Error(err)
			}
			batch <- time.Since(start)
		}()
		synctest.Wait() // batch waits in the queue
		if s := g.Stats(); s.Queued != 1 {
			t.Fatalf("batch is not queued: %+v", s)
		}
		if err := g.Do(ctx, 3, noop, gate.Priority("interactive")); err != nil || time.Since(start) != 0 {
			t.Fatalf("interactive behind a waiting batch: %v after %v, want at once", err, time.Since(start))
		}
		if got := <-batch; got != 2*time.Second {
			t.Fatalf("batch waited %v, want 2 s", got)
		}
		// 10 tokens taken at 0: 2 are there at 2 s, the third at 3 s,
		// for any class.
		start = time.Now()
		if err := g.Do(ctx, 3, noop, gate.Priority("interactive")); err != nil || time.Since(start) != time.Second {
			t.Fatalf("interactive 3 at 2 s: %v after %v, want 1 s", err, time.Since(start))
		}
	})
}

// In-flight slots by class (MaxInFlight 4, batch reserve 0.5: 2 slots):
// a third batch call waits for a slot while interactive calls take the
// other two at once; batch goes when fewer than 2 slots are held. A
// class left no slot is a configuration error.
func TestLocalPrioritySlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		classes := []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 500_000}}
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 100, Rate: 100}, MaxInFlight: 4, MaxQueue: 10, MaxWait: time.Minute, Priorities: classes})
		ctx := context.Background()
		var done [4]chan struct{}
		hold := func(i int, class string) {
			done[i] = make(chan struct{})
			go func() {
				if err := g.Do(ctx, 1, func(context.Context) error { <-done[i]; return nil }, gate.Priority(class)); err != nil {
					t.Error(err)
				}
			}()
			synctest.Wait()
		}
		hold(0, "batch")
		hold(1, "batch")
		third := make(chan struct{})
		go func() {
			if err := g.Do(ctx, 1, noop, gate.Priority("batch")); err != nil {
				t.Error(err)
			}
			close(third)
		}()
		synctest.Wait()
		hold(2, "interactive")
		if s := g.Stats(); s.InFlight != 3 || s.Queued != 1 {
			t.Fatalf("interactive passes the batch waiting for its share: %+v", s)
		}
		close(done[0]) // 2 held: still batch's share
		synctest.Wait()
		select {
		case <-third:
			t.Fatal("batch admitted with 2 slots held (its share is 2 of 4)")
		default:
		}
		close(done[2]) // 1 held
		synctest.Wait()
		select {
		case <-third:
		default:
			t.Fatalf("batch not admitted with 1 slot held: %+v", g.Stats())
		}
		close(done[1])
		if _, err := gate.New(gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}, MaxInFlight: 1, Priorities: classes}); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Fatalf("a class left no slot: %v", err)
		}
	})
}

// The proof on a gate in process, in virtual time: batch floods
// at 10x the refill (B=100, r=100/s, one call a millisecond) while
// interactive sends 20 % of it. Interactive is admitted every time and
// waits at most batch's MaxQueue (0: never; 500 ms with reserve 0.1,
// whose line may run past the bucket); batch takes the rest, so the
// gate admits at least 95 % of B + r·t and, at every admission, at most
// B + r·t since the start.
func TestLocalPriorityFlood(t *testing.T) {
	for _, c := range []struct {
		reserve  uint32
		maxQueue time.Duration
	}{{500_000, 0}, {100_000, 500 * time.Millisecond}} {
		synctest.Test(t, func(t *testing.T) {
			classes := []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: c.reserve, MaxQueue: c.maxQueue, QueueBounded: true}}
			g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 100, Rate: 100}, MaxQueue: 100_000, MaxWait: time.Minute, Priorities: classes})
			ctx := context.Background()
			const span = 10 * time.Second
			start := time.Now()
			var mu sync.Mutex
			var at, iwait []time.Duration
			var ifail int
			call := func(class string) {
				began := time.Now()
				err := g.Do(ctx, 1, func(context.Context) error {
					mu.Lock()
					at = append(at, time.Since(start))
					if class == "interactive" {
						iwait = append(iwait, time.Since(began))
					}
					mu.Unlock()
					return nil
				}, gate.Priority(class))
				if err != nil && class == "interactive" {
					mu.Lock()
					ifail++
					mu.Unlock()
				}
			}
			var wg sync.WaitGroup
			for n := 0; time.Since(start) < span; n++ {
				wg.Add(1)
				go func() { defer wg.Done(); call("batch") }()
				if n%50 == 25 {
					wg.Add(1)
					go func() { defer wg.Done(); call("interactive") }()
				}
				time.Sleep(time.Millisecond)
			}
			wg.Wait()
			slices.Sort(at)
			for i, d := range at {
				if int64(i+1-100)*int64(time.Second) > 100*int64(d) {
					t.Fatalf("%d admitted by %v: more than B + r·t", i+1, d)
				}
			}
			inSpan := 0
			for _, d := range at {
				if d <= span {
					inSpan++
				}
			}
			if ifail != 0 || len(iwait) != 200 || slices.Max(iwait) > c.maxQueue {
				t.Fatalf("interactive: %d refused, %d admitted, longest wait %v (bound %v)", ifail, len(iwait), slices.Max(iwait), c.maxQueue)
			}
			if want := (100 + 100*int(span/time.Second)) * 95 / 100; inSpan < want {
				t.Fatalf("%d admitted within %v, want at least %d (95 %% of B + r·t)", inSpan, span, want)
			}
			t.Logf("reserve %d ppm, max_queue %v: %d admitted within %v (B + r·t = 1100), interactive 200/200, longest wait %v",
				c.reserve, c.maxQueue, inSpan, span, slices.Max(iwait))
		})
	}
}

// A class's reserve cuts every budget of the call, dimensions included,
// on Do and on Reserve: batch (0.5) may charge 5 of a dimension's 10
// tokens (6 it never may: ErrCostExceedsCapacity), interactive the rest.
func TestLocalPriorityDimensions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		classes := []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 500_000, QueueBounded: true}}
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 100, Rate: 100}, MaxQueue: 10, MaxWait: time.Minute,
			Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 10, Rate: 1}}}, Priorities: classes})
		ctx := context.Background()
		if err := g.Do(ctx, 1, noop, gate.Priority("batch"), gate.Charge("tokens", 6)); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			t.Fatalf("batch 6 of the dimension's 10 (its view 5): %v", err)
		}
		tk, err := g.Reserve(ctx, 1, gate.Priority("batch"), gate.Charge("tokens", 5))
		if err != nil {
			t.Fatalf("batch reserves 5 of 10: %v", err)
		}
		tk.Release()
		if _, err := g.Reserve(ctx, 1, gate.Priority("batch"), gate.Charge("tokens", 1)); !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("batch 1 more: %v", err)
		}
		if err := g.Do(ctx, 1, noop, gate.Priority("interactive"), gate.Charge("tokens", 5)); err != nil {
			t.Fatalf("interactive takes the other 5: %v", err)
		}
		if s := g.Stats(); s.Tokens != 98 {
			t.Fatalf("requests budget: %v tokens, want 98 (the refused calls took nothing)", s.Tokens)
		}
	})
}

// The fast path of a call without options allocates nothing, on a gate
// with classes too (docs/library.md: "takes no lock and does not
// allocate").
func TestFastPathAllocatesNothing(t *testing.T) {
	for _, classes := range [][]policy.Priority{nil, p1Classes} {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 1e9, Rate: 1e9}, MaxInFlight: 16, MaxQueue: 64, Priorities: classes})
		ctx := context.Background()
		if n := testing.AllocsPerRun(1000, func() {
			if err := g.Do(ctx, 1, noop); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%d classes: %v allocations per Do", len(classes), n)
		}
	}
}
