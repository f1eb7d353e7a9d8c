package gate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
)

func newGate(t *testing.T, cfg gate.Config) *gate.Gate {
	t.Helper()
	g, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func noop(context.Context) error { return nil }

// pulse fires n simultaneous calls and returns each admitted call's time
// (since the start) and each refusal's error.
func pulse(t *testing.T, g *gate.Gate, n int) (admitted []time.Duration, refused []error) {
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := g.Do(context.Background(), 1, func(context.Context) error {
				mu.Lock()
				admitted = append(admitted, time.Since(start))
				mu.Unlock()
				return nil
			})
			if err != nil {
				mu.Lock()
				refused = append(refused, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return admitted, refused
}

// The pulse of docs/behaviour.md section 3: 1000 simultaneous calls through
// r=50/s, B=20, with room to wait: none dropped, the last at 19.6 s, about
// 50 a second.
func TestPulseWithRoomToWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 20, Rate: 50}, MaxQueue: 1000})
		admitted, refused := pulse(t, g, 1000)
		if len(refused) != 0 || len(admitted) != 1000 {
			t.Fatalf("admitted %d, refused %d (%v)", len(admitted), len(refused), refused[:min(len(refused), 3)])
		}
		var last time.Duration
		perSecond := map[int]int{}
		for _, a := range admitted {
			last = max(last, a)
			perSecond[int(a/time.Second)]++
		}
		if last != 19600*time.Millisecond {
			t.Fatalf("last admitted at %v, want 19.6s", last)
		}
		for s, n := range perSecond {
			limit := 50
			if s == 0 {
				limit = 20 + 50 // the burst, then the refill
			}
			if n > limit {
				t.Fatalf("second %d admitted %d (> %d): %v", s, n, limit, perSecond)
			}
		}
		if st := g.Stats(); st.Admitted != 1000 || st.Queued != 0 || st.InFlight != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// The same pulse with MaxQueue 100: 20 pass at once, 100 wait, 880 are
// refused at t=0 with ErrQueueFull.
func TestPulseWithCappedQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 20, Rate: 50}, MaxQueue: 100})
		start := time.Now()
		var refusedAt []time.Duration
		var mu sync.Mutex
		var wg sync.WaitGroup
		var passed atomic.Int64
		for range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := g.Do(context.Background(), 1, noop)
				if err == nil {
					passed.Add(1)
					return
				}
				if !errors.Is(err, sluice.ErrQueueFull) {
					t.Errorf("refusal %v", err)
				}
				mu.Lock()
				refusedAt = append(refusedAt, time.Since(start))
				mu.Unlock()
			}()
		}
		wg.Wait()
		if passed.Load() != 120 || len(refusedAt) != 880 {
			t.Fatalf("passed %d refused %d, want 120 and 880", passed.Load(), len(refusedAt))
		}
		for _, at := range refusedAt {
			if at != 0 {
				t.Fatalf("a refusal came at %v, not at once", at)
			}
		}
		if st := g.Stats(); st.RejectedQueueFull != 880 || st.Rejected["queue_full"] != 880 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestMaxWaitAndDeadlineFailFastConsumeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 5, Rate: 1}, StartEmpty: true, MaxQueue: 10, MaxWait: 2 * time.Second})
		start := time.Now()
		err := g.Do(context.Background(), 3, noop) // needs 3 s > MaxWait 2 s
		if !errors.Is(err, sluice.ErrWaitTooLong) || time.Since(start) != 0 {
			t.Fatalf("MaxWait: %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = g.Do(ctx, 2, noop) // needs 2 s > deadline 1 s
		if !errors.Is(err, sluice.ErrWaitTooLong) || time.Since(start) != 0 {
			t.Fatalf("deadline: %v after %v", err, time.Since(start))
		}
		if st := g.Stats(); st.Tokens != 0 || st.RejectedWaitTooLong != 2 {
			t.Fatalf("refusals consumed tokens: %+v", st)
		}
		// Within both limits it waits exactly the refill.
		if err := g.Do(context.Background(), 2, noop); err != nil || time.Since(start) != 2*time.Second {
			t.Fatalf("admissible: %v after %v", err, time.Since(start))
		}
		if _, err := g.Reserve(context.Background(), 6); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			t.Fatalf("cost 6 > 5: %v", err)
		}
		if err := g.Do(context.Background(), -1, noop); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Fatalf("cost -1: %v", err)
		}
	})
}

// A waiter whose context ends leaves the queue, its tokens return exactly,
// and the waiters behind it move forward.
func TestCancelReturnsTokensAndMovesQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}, StartEmpty: true, MaxQueue: 10})
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		errA := make(chan error, 1)
		go func() { errA <- g.Do(ctx, 6, noop) }() // due at 6 s
		synctest.Wait()
		var bAt time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := g.Do(context.Background(), 3, noop); err != nil { // due at 9 s
				t.Error(err)
			}
			bAt = time.Since(start)
		}()
		synctest.Wait()
		if st := g.Stats(); st.Tokens != -9 || st.Queued != 2 {
			t.Fatalf("before cancel: %+v", st)
		}
		time.Sleep(time.Second)
		cancel()
		if err := <-errA; !errors.Is(err, context.Canceled) {
			t.Fatalf("A: %v", err)
		}
		<-done
		if bAt != 3*time.Second {
			t.Fatalf("B admitted at %v, want 3s once A's 6 tokens came back", bAt)
		}
		if st := g.Stats(); st.Tokens != 0 || st.Canceled != 1 || st.Queued != 0 {
			t.Fatalf("after: %+v", st)
		}
	})
}

// Waiters are admitted in arrival order: a large cost is not starved by
// small ones behind it.
func TestFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 10}, StartEmpty: true, MaxQueue: 100})
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		costs := []int64{10, 1, 1, 10, 1}
		for i, c := range costs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := g.Do(context.Background(), c, noop); err != nil {
					t.Error(err)
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			}()
			synctest.Wait()
		}
		wg.Wait()
		for i := range order {
			if order[i] != i {
				t.Fatalf("admitted in order %v", order)
			}
		}
	})
}

// The in-flight cap holds under load, also when calls panic.
func TestInFlightCapWithPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 1000, Rate: 1000}, MaxInFlight: 3, MaxQueue: 100})
		var running, peak atomic.Int64
		var wg sync.WaitGroup
		var panics atomic.Int64
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if r := recover(); r != nil {
						panics.Add(1)
					}
				}()
				g.Do(context.Background(), 1, func(context.Context) error {
					n := running.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(100 * time.Millisecond)
					running.Add(-1)
					if i%4 == 0 {
						panic("tool exploded")
					}
					return nil
				})
			}()
		}
		wg.Wait()
		if peak.Load() != 3 {
			t.Fatalf("peak in flight %d, want 3", peak.Load())
		}
		if panics.Load() != 15 {
			t.Fatalf("panics re-raised %d, want 15", panics.Load())
		}
		if st := g.Stats(); st.InFlight != 0 || st.Admitted != 60 {
			t.Fatalf("slots leaked: %+v", st)
		}
	})
}

// A 10 s server hint pauses every other caller, queued or new, for 10 s.
func TestServerHintPausesEveryone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 100, Rate: 100}, MaxQueue: 100})
		start := time.Now()
		err := g.Do(context.Background(), 1, func(context.Context) error {
			return gate.WithRetryAfter(errors.New("429 Too Many Requests"), 10*time.Second)
		})
		if d, ok := gate.RetryAfterOf(err); !ok || d != 10*time.Second {
			t.Fatalf("err %v", err)
		}
		if st := g.Stats(); !st.PausedUntil.Equal(start.Add(10 * time.Second)) {
			t.Fatalf("paused until %v", st.PausedUntil)
		}
		var wg sync.WaitGroup
		var early atomic.Int64
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 300 * time.Millisecond) // arrive during the pause
				g.Do(context.Background(), 1, func(context.Context) error {
					if time.Since(start) < 10*time.Second {
						early.Add(1)
					}
					return nil
				})
			}()
		}
		wg.Wait()
		if early.Load() != 0 {
			t.Fatalf("%d calls ran during the pause", early.Load())
		}
		if time.Since(start) != 10*time.Second {
			t.Fatalf("finished at %v", time.Since(start))
		}
		// A hint longer than MaxWait refuses at once.
		g2 := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 10}, MaxQueue: 10, MaxWait: time.Second})
		g2.Pause(5 * time.Second)
		before := time.Now()
		if err := g2.Do(context.Background(), 1, noop); !errors.Is(err, sluice.ErrWaitTooLong) || time.Since(before) != 0 {
			t.Fatalf("hint beyond MaxWait: %v after %v", err, time.Since(before))
		}
	})
}

// Retries are bounded, admitted through the gate again, labelled, never
// sooner than the hint, and jittered.
func TestRetriesBoundedAndLabelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []gate.Event
		var mu sync.Mutex
		g := newGate(t, gate.Config{
			Limit: bucket.Limit{Capacity: 10, Rate: 1}, MaxQueue: 10,
			Retry: gate.Retry{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second},
			Observe: func(e gate.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			},
		})
		start := time.Now()
		var calls []time.Duration
		fail := errors.New("503")
		err := g.Do(context.Background(), 2, func(context.Context) error {
			calls = append(calls, time.Since(start))
			if len(calls) == 1 {
				return gate.WithRetryAfter(fail, 2*time.Second)
			}
			return gate.Retryable(fail)
		})
		if !errors.Is(err, fail) || len(calls) != 3 {
			t.Fatalf("err %v after %d calls", err, len(calls))
		}
		if calls[1] < 2*time.Second {
			t.Fatalf("retried at %v, sooner than the 2 s hint", calls[1])
		}
		if gap := calls[2] - calls[1]; gap < 100*time.Millisecond || gap > 400*time.Millisecond {
			t.Fatalf("second retry after %v, want within [100ms, 400ms]", gap)
		}
		st := g.Stats()
		if st.Admitted != 3 || st.AdmittedRetries != 2 || st.Retries != 2 {
			t.Fatalf("stats %+v", st)
		}
		var retries int
		for _, e := range events {
			if e.Retry {
				retries++
			}
			if e.Limiter != "gate" || e.Capacity != 10 || e.RefillPerSecond != 1 || e.Cost != 2 {
				t.Fatalf("event %+v", e)
			}
		}
		if retries != 2 || len(events) != 3 {
			t.Fatalf("events %+v", events)
		}
		// Not retryable: one call.
		n := 0
		g.Do(context.Background(), 1, func(context.Context) error { n++; return fail })
		if n != 1 {
			t.Fatalf("plain error retried: %d calls", n)
		}
	})
}

// Over many seeds the retry delays spread over their whole window.
func TestRetryJitterDistribution(t *testing.T) {
	const base, maxD = 100 * time.Millisecond, 10 * time.Second
	var firsts []time.Duration
	for seed := range 400 {
		synctest.Test(t, func(t *testing.T) {
			g := newGate(t, gate.Config{
				Limit: bucket.Limit{Capacity: 100, Rate: 100}, MaxQueue: 10,
				Retry: gate.Retry{MaxAttempts: 2, BaseDelay: base, MaxDelay: maxD},
				Rand:  rand.New(rand.NewPCG(uint64(seed), 1)),
			})
			var at []time.Duration
			start := time.Now()
			g.Do(context.Background(), 1, func(context.Context) error {
				at = append(at, time.Since(start))
				return gate.Retryable(errors.New("flaky"))
			})
			firsts = append(firsts, at[1]-at[0])
		})
	}
	// First retry: uniform in [100ms, 200ms].
	var sum time.Duration
	low, high := 0, 0
	for _, d := range firsts {
		if d < base || d > 2*base {
			t.Fatalf("delay %v outside [100ms, 200ms]", d)
		}
		sum += d
		if d < 125*time.Millisecond {
			low++
		}
		if d > 175*time.Millisecond {
			high++
		}
	}
	mean := sum / time.Duration(len(firsts))
	if mean < 140*time.Millisecond || mean > 160*time.Millisecond || low < 70 || high < 70 {
		t.Fatalf("not uniform: mean %v, %d in the lowest quarter, %d in the highest", mean, low, high)
	}
}

func TestReserveSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 1000, Rate: 10}, MaxInFlight: 1, MaxQueue: 5})
		tk, err := g.Reserve(context.Background(), 500) // an LLM call estimated at 500 tokens
		if err != nil {
			t.Fatal(err)
		}
		if st := g.Stats(); st.InFlight != 1 || st.Tokens != 500 {
			t.Fatalf("reserved: %+v", st)
		}
		if err := tk.Settle(120); err != nil {
			t.Fatal(err)
		}
		tk.Release()
		tk.Release()
		if st := g.Stats(); st.InFlight != 0 || st.Tokens != 880 {
			t.Fatalf("settled 120: %+v", st)
		}
		tk2, _ := g.Reserve(context.Background(), 800)
		if err := tk2.Settle(1500); err != nil { // the excess goes into debt
			t.Fatal(err)
		}
		tk2.Release()
		if st := g.Stats(); st.Tokens != -620 {
			t.Fatalf("settled 1500: %+v", st)
		}
		start := time.Now()
		if err := g.Do(context.Background(), 10, noop); err != nil || time.Since(start) != 63*time.Second {
			t.Fatalf("after debt: %v at %v, want 63s", err, time.Since(start))
		}
	})
}

// A gate without MaxQueue never waits, and its refusal says what to set;
// a full queue's refusal gives its figures.
func TestQueueFullMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, gate.Config{Name: "x", Limit: bucket.Limit{Capacity: 1, Rate: 1}, MaxWait: time.Minute})
		if err := g.Do(context.Background(), 1, noop); err != nil {
			t.Fatalf("first call: %v", err)
		}
		start := time.Now()
		err := g.Do(context.Background(), 1, noop)
		const zero = `sluice: "x": cannot wait: MaxQueue is 0, so no caller may wait (set Config.MaxQueue to let callers queue)`
		if !errors.Is(err, sluice.ErrQueueFull) || err.Error() != zero || time.Since(start) != 0 {
			t.Fatalf("MaxQueue 0: %v after %v, want at once %q", err, time.Since(start), zero)
		}

		g = newGate(t, gate.Config{Name: "x", Limit: bucket.Limit{Capacity: 1, Rate: 1}, StartEmpty: true, MaxQueue: 2})
		done := make(chan error, 2)
		for range 2 {
			go func() { done <- g.Do(context.Background(), 1, noop) }()
		}
		synctest.Wait()
		err = g.Do(context.Background(), 1, noop)
		const full = `sluice: "x": 2 callers already wait (MaxQueue 2)`
		if !errors.Is(err, sluice.ErrQueueFull) || err.Error() != full {
			t.Fatalf("full queue: %v, want %q", err, full)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatalf("waiter: %v", err)
			}
		}
	})
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for field, cfg := range map[string]gate.Config{
		"Limit":              {},
		"MaxInFlight":        {Limit: bucket.PerSecond(1), MaxInFlight: -1},
		"MaxQueue":           {Limit: bucket.PerSecond(1), MaxQueue: -1},
		"MaxWait":            {Limit: bucket.PerSecond(1), MaxWait: -1},
		"Retry.MaxAttempts":  {Limit: bucket.PerSecond(1), Retry: gate.Retry{MaxAttempts: -1}},
		"Retry.BaseDelay":    {Limit: bucket.PerSecond(1), Retry: gate.Retry{BaseDelay: -1}},
		"Retry.MaxDelay":     {Limit: bucket.PerSecond(1), Retry: gate.Retry{BaseDelay: time.Second, MaxDelay: time.Millisecond}},
		"Limit: sluice: rat": {Limit: bucket.Limit{Capacity: 1, Rate: -1}},
	} {
		_, err := gate.New(cfg)
		if err == nil || !errors.Is(err, sluice.ErrInvalidLimit) || !contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Concurrent Do, Reserve/Settle and cancellations on the real clock: the
// in-flight cap holds and nothing leaks.
func TestConcurrentRealClock(t *testing.T) {
	g := newGate(t, gate.Config{Limit: bucket.Limit{Capacity: 50, Rate: 5000}, MaxInFlight: 4, MaxQueue: 64, MaxWait: time.Second})
	var running, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(j%5)*time.Millisecond+time.Millisecond)
				if i%2 == 0 {
					g.Do(ctx, 2, func(context.Context) error {
						n := running.Add(1)
						if n > peak.Load() {
							peak.Store(n)
						}
						running.Add(-1)
						return nil
					})
				} else if tk, err := g.Reserve(ctx, 3); err == nil {
					tk.Settle(int64(j % 4))
					tk.Release()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if st := g.Stats(); st.InFlight != 0 || st.Queued != 0 || peak.Load() > 4 {
		t.Fatalf("stats %+v peak %d", st, peak.Load())
	}
}
