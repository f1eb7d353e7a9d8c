package bucket_test

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
)

// A stale time (read before contending) must never mint credit. This is the
// sequence by which x/time/rate over-admits (golang/go#71360): its limiter
// moves "last" back to the stale time and then credits the same interval
// twice.
func TestStaleAllowAtNeverMints(t *testing.T) {
	t.Parallel()
	b, _ := newAt(t, bucket.Limit{Capacity: 1, Rate: 1})
	at := func(s float64) time.Time { return epoch0.Add(time.Duration(s * float64(time.Second))) }
	if d, _ := b.AllowAt(at(10), 1); !d.Allowed {
		t.Fatal("first refused")
	}
	if d, _ := b.AllowAt(at(9), 1); d.Allowed {
		t.Fatal("stale time admitted")
	}
	if d, _ := b.AllowAt(at(10.5), 1); d.Allowed {
		t.Fatalf("admitted at 10.5 s with half a token: stale time minted credit")
	}
	if d, _ := b.AllowAt(at(11), 1); !d.Allowed {
		t.Fatal("refused at 11 s with one token")
	}
}

// Concurrent callers that read the clock before contending: whatever the
// interleaving, admissions within any window stay within B + r*t.
func TestStaleTimesUnderContention(t *testing.T) {
	l := bucket.Limit{Capacity: 10, Rate: 1000}
	b, err := bucket.New(l)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	deadline := start.Add(200 * time.Millisecond)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				now := time.Now() // read, then contend
				if now.After(deadline) {
					return
				}
				if d, _ := b.AllowAt(now, 1); d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	bound := float64(l.Capacity) + l.Rate*deadline.Sub(start).Seconds()
	if got := float64(admitted.Load()); got > bound {
		t.Fatalf("admitted %v > B + r*t = %v", got, bound)
	}
}

// A clock that steps backwards neither adds nor removes credit, also after
// it steps forward again.
func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 3, Rate: 1})
	c.Advance(10 * time.Second)
	allow(t, b, 3) // drained at t=10
	c.Set(epoch0.Add(5 * time.Second))
	if d := allow(t, b, 1); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("after stepping back: %+v (added credit?)", d)
	}
	c.Set(epoch0.Add(10*time.Second + 500*time.Millisecond))
	if d := allow(t, b, 1); d.Allowed {
		t.Fatalf("at 10.5 s: %+v (the step back minted credit)", d)
	}
	c.Set(epoch0.Add(11 * time.Second))
	if d := allow(t, b, 1); !d.Allowed {
		t.Fatalf("at 11 s: %+v (the step back removed credit)", d)
	}

	// Full bucket, clock steps back: still full (no credit removed).
	b2, c2 := newAt(t, bucket.Limit{Capacity: 3, Rate: 1})
	c2.Advance(time.Hour)
	allow(t, b2, 0)
	c2.Advance(-30 * time.Minute)
	if d := allow(t, b2, 3); !d.Allowed {
		t.Fatalf("full bucket after a step back: %+v", d)
	}
}

// Many goroutines racing at a frozen instant admit exactly the capacity.
func TestConcurrentFrozenInstant(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int64{1, 7, 1000} {
		b, _ := newAt(t, bucket.Limit{Capacity: capacity, Rate: 0.5})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					if d, err := b.Allow(1); err == nil && d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if admitted.Load() != capacity {
			t.Fatalf("capacity %d: admitted %d", capacity, admitted.Load())
		}
	}
}

// Allow, Reserve and Cancel racing at a frozen instant keep the accounting
// exact: the tokens left are the capacity minus what was taken plus what
// was returned, to the unit.
func TestConcurrentMixedExact(t *testing.T) {
	t.Parallel()
	l := bucket.Limit{Capacity: 500, Rate: 100}
	b, _ := newAt(t, l)
	var net atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				switch (g + i) % 3 {
				case 0:
					if d, _ := b.Allow(2); d.Allowed {
						net.Add(2)
					}
				case 1:
					if r, err := b.Reserve(3, 2*time.Second); err == nil {
						net.Add(3)
						if i%2 == 0 {
							r.Cancel() // before the tokens refill: returns exactly 3
							net.Add(-3)
						}
					}
				default:
					b.Tokens()
				}
			}
		}()
	}
	wg.Wait()
	if got, want := b.Tokens(), float64(l.Capacity-net.Load()); got != want {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	if b.Tokens() < -200 {
		t.Fatalf("debt beyond the 2 s max wait: %v", b.Tokens())
	}
}

func TestReserveCancelExact(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 10, Rate: 1})
	allow(t, b, 10)
	r1, err := b.Reserve(5, time.Minute)
	if err != nil || r1.Delay() != 5*time.Second {
		t.Fatalf("r1: %v %v", r1, err)
	}
	r2, err := b.Reserve(4, time.Minute)
	if err != nil || r2.Delay() != 9*time.Second {
		t.Fatalf("r2: %v %v", r2.Delay(), err)
	}
	if got := b.Tokens(); got != -9 {
		t.Fatalf("tokens %v, want -9", got)
	}
	// Cancelling the earlier one returns exactly its 5 tokens even though a
	// later reservation exists (x/time/rate returns less here).
	c.Advance(time.Second)
	r1.Cancel()
	r1.Cancel() // idempotent
	if got := b.Tokens(); got != -3 {
		t.Fatalf("after cancel: tokens %v, want -3 (as if r1 never taken)", got)
	}
	// The same as a bucket that never saw r1.
	ref, rc := newAt(t, bucket.Limit{Capacity: 10, Rate: 1})
	allow(t, ref, 10)
	if _, err := ref.Reserve(4, time.Minute); err != nil {
		t.Fatal(err)
	}
	rc.Advance(time.Second)
	for range 20 {
		if b.Tokens() != ref.Tokens() {
			t.Fatalf("diverged: %v vs %v", b.Tokens(), ref.Tokens())
		}
		c.Advance(time.Second)
		rc.Advance(time.Second)
	}
	// Once the booked tokens would have been refilled (time to act plus
	// the 10 s to refill them), cancelling returns nothing: it could only
	// create credit.
	r3, _ := b.Reserve(10, time.Minute)
	c.Advance(r3.Delay() + 10*time.Second)
	before := b.Tokens()
	r3.Cancel()
	if b.Tokens() != before || before != 10 {
		t.Fatalf("late cancel returned tokens: %v -> %v", before, b.Tokens())
	}
	// Just before that, it returns them exactly: act, then cancel 9.9 s on.
	r4, _ := b.Reserve(10, time.Minute) // due now, tokens 0
	c.Advance(9900 * time.Millisecond)  // 9.9 tokens refilled
	r4.Cancel()
	if got := b.Tokens(); got != 10 {
		t.Fatalf("cancel within the refill: %v, want 10 (full)", got)
	}
}

// The minting sequence a careless Cancel allows: reserve everything, let
// the bucket refill, spend it again, then cancel the old reservation.
func TestLateCancelNeverMints(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 10, Rate: 1})
	r, _ := b.Reserve(10, 0)
	c.Advance(20 * time.Second) // full again
	allow(t, b, 10)
	r.Cancel()
	if got := b.Tokens(); got != 0 {
		t.Fatalf("tokens %v after a late cancel, want 0", got)
	}
}

func TestSettle(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 100, Rate: 10})
	r, _ := b.Reserve(40, 0) // estimate 40
	c.Advance(time.Second)   // 60 + 10 = 70
	if err := r.Settle(15); err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(); got != 95 {
		t.Fatalf("after settling 40 -> 15: %v, want 95", got)
	}
	if err := r.Settle(1); err == nil {
		t.Fatal("second settle accepted")
	}
	r2, _ := b.Reserve(50, 0) // 45 left
	if err := r2.Settle(-1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("negative: %v", err)
	}
	if err := r2.Settle(170); err != nil { // 120 more than reserved: debt
		t.Fatal(err)
	}
	if got := b.Tokens(); got != -75 {
		t.Fatalf("after settling 50 -> 170: %v, want -75", got)
	}
	if d := allow(t, b, 1); d.Allowed || d.RetryAfter != 7600*time.Millisecond {
		t.Fatalf("in debt: %+v", d)
	}
}

func TestReserveWaitTooLongBooksNothing(t *testing.T) {
	t.Parallel()
	b, _ := newAt(t, bucket.Limit{Capacity: 10, Rate: 1})
	allow(t, b, 10)
	_, err := b.Reserve(5, 4*time.Second)
	if !errors.Is(err, sluice.ErrWaitTooLong) {
		t.Fatalf("err %v", err)
	}
	if b.Tokens() != 0 {
		t.Fatalf("refused reservation booked: %v", b.Tokens())
	}
	if r, err := b.Reserve(5, 5*time.Second); err != nil || r.Delay() != 5*time.Second {
		t.Fatalf("exact max wait refused: %v", err)
	}
}

// Waiters are served in arrival order: a large cost is not starved by
// small ones that come after it.
func TestWaitFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := bucket.New(bucket.Limit{Capacity: 10, Rate: 1}, bucket.StartEmpty())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		var order []int64
		var wg sync.WaitGroup
		for _, cost := range []int64{10, 1, 1, 1} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := b.Wait(context.Background(), cost); err != nil {
					t.Error(err)
				}
				mu.Lock()
				order = append(order, int64(time.Since(start)/time.Second))
				mu.Unlock()
			}()
			synctest.Wait() // each goroutine books before the next arrives
		}
		wg.Wait()
		want := []int64{10, 11, 12, 13}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("admitted at %v s, want %v", order, want)
			}
		}
	})
}

func TestWaitDeadlineFailsFastAndBooksNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := bucket.New(bucket.Limit{Capacity: 10, Rate: 1}, bucket.StartEmpty())
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		err := b.Wait(ctx, 5)
		if !errors.Is(err, sluice.ErrWaitTooLong) || time.Since(start) != 0 {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
		if got := b.Tokens(); got != 0 {
			t.Fatalf("booked: tokens %v", got)
		}
		// A deadline that leaves room waits exactly the refill time.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel2()
		if err := b.Wait(ctx2, 5); err != nil || time.Since(start) != 5*time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}

func TestWaitCancelReturnsTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := bucket.New(bucket.Limit{Capacity: 10, Rate: 1}, bucket.StartEmpty())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- b.Wait(ctx, 8) }()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := b.Tokens(); got != -6 {
			t.Fatalf("while waiting: tokens %v, want -6", got)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
		if got := b.Tokens(); got != 2 {
			t.Fatalf("after cancel: tokens %v, want 2", got)
		}
		if err := b.Wait(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(ctxDone(), 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("done ctx: %v", err)
		}
	})
}

func ctxDone() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestSetLimitKeepsCredit(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 10, Rate: 1})
	allow(t, b, 4) // 6 left
	if err := b.SetLimit(bucket.Limit{Capacity: 20, Rate: 5}); err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(); got != 6 {
		t.Fatalf("after raising: %v, want 6", got)
	}
	c.Advance(time.Second)
	if got := b.Tokens(); got != 11 {
		t.Fatalf("new rate: %v, want 11", got)
	}
	if err := b.SetLimit(bucket.Limit{Capacity: 4, Rate: 1}); err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(); got != 4 {
		t.Fatalf("after lowering capacity: %v, want 4", got)
	}
	if _, err := b.Allow(5); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("new capacity not enforced: %v", err)
	}
	// Debt survives a change.
	allow(t, b, 4)
	if _, err := b.Reserve(3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.SetLimit(bucket.Limit{Capacity: 4, Rate: 3}); err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(); got != -3 {
		t.Fatalf("debt after change: %v, want -3", got)
	}
	if err := b.SetLimit(bucket.Limit{Capacity: 0, Rate: 3}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("invalid: %v", err)
	}
	if b.Limit() != (bucket.Limit{Capacity: 4, Rate: 3}) {
		t.Fatalf("invalid limit changed the bucket: %v", b.Limit())
	}
}

// The default clock is monotonic: Allow on a real bucket refills.
func TestRealClock(t *testing.T) {
	b, _ := bucket.New(bucket.Limit{Capacity: 1, Rate: 1000})
	if d, _ := b.Allow(1); !d.Allowed {
		t.Fatal("refused")
	}
	time.Sleep(3 * time.Millisecond)
	if d, _ := b.Allow(1); !d.Allowed {
		t.Fatal("no refill on the real clock")
	}
}

func TestTakeUndo(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 10, Rate: 1})
	d, r, err := b.Take(4)
	if err != nil || !d.Allowed || d.ResetAfter != 4*time.Second {
		t.Fatalf("take: %+v %v", d, err)
	}
	c.Advance(3 * time.Second)
	if !b.Undo(r) || b.Tokens() != 10 {
		t.Fatalf("undo within the refill: tokens %v", b.Tokens())
	}
	_, r2, _ := b.Take(4)
	c.Advance(4 * time.Second) // refilled: undoing now would mint
	if b.Undo(r2) || b.Tokens() != 10 {
		t.Fatalf("late undo: tokens %v", b.Tokens())
	}
	if d, r3, _ := b.Take(11); d.Allowed || b.Undo(r3) {
		t.Fatal("refused take gave a usable receipt")
	}
	if b.Undo(bucket.Receipt{}) {
		t.Fatal("zero receipt undone")
	}
}

// Reserve, Delay and Cancel on the default (monotonic) clock, in virtual
// time.
func TestReserveDelayCancelSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := bucket.New(bucket.Limit{Capacity: 4, Rate: 2}, bucket.StartEmpty())
		r1, err := b.Reserve(2, time.Minute)
		if err != nil || r1.Delay() != time.Second {
			t.Fatalf("r1: %v %v", r1.Delay(), err)
		}
		r2, _ := b.Reserve(4, time.Minute)
		if r2.Delay() != 3*time.Second {
			t.Fatalf("r2 behind r1: %v", r2.Delay())
		}
		time.Sleep(500 * time.Millisecond)
		if r1.Delay() != 500*time.Millisecond {
			t.Fatalf("r1 after 0.5 s: %v", r1.Delay())
		}
		r1.Cancel() // returns 2 exactly: the bucket owes 4 - 1 = 3 tokens
		if got := b.Tokens(); got != -3 {
			t.Fatalf("tokens %v, want -3", got)
		}
		time.Sleep(r2.Delay()) // r2 keeps its time (3 s); r1's tokens came back
		if d, _ := b.Allow(0); !d.Allowed || d.Remaining != 2 || b.Tokens() != 2 {
			t.Fatalf("at r2's time: %+v, tokens %v", d, b.Tokens())
		}
		if _, err := b.Reserve(4, 500*time.Millisecond); !errors.Is(err, sluice.ErrWaitTooLong) { // needs 1 s
			t.Fatalf("over max wait: %v", err)
		}
	})
}
