package limiter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// countingStore counts Take calls (round trips to the store).
type countingStore struct {
	store.Store
	takes atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, items)
}

const bookSrc = `
limits:
  - name: api
    key: "k:{k}"
    capacity: 1
    refill_per_second: 10
`

// Check with MaxWait books its place in line: one store call per request,
// then one sleep; waiters are admitted in arrival order, 100 ms apart,
// never more than the bucket allows.
func TestCheckBooksFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := &countingStore{Store: memstore.New()}
		l := limiterOver(t, bookSrc, cs)
		ctx := context.Background()
		d := map[string]string{"k": "a"}
		start := time.Now()
		var mu sync.Mutex
		var order []int
		var admittedAt []time.Duration
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				res, err := l.Check(ctx, limiter.Request{Descriptors: d, MaxWait: 5 * time.Second})
				if err != nil || !res.Allowed {
					t.Errorf("waiter %d: %+v %v", i, res, err)
				}
				mu.Lock()
				order, admittedAt = append(order, i), append(admittedAt, time.Since(start))
				mu.Unlock()
			})
			synctest.Wait() // waiter i has booked before i+1 arrives
		}
		wg.Wait()
		for j, at := range admittedAt {
			if order[j] != j || at != time.Duration(j)*100*time.Millisecond {
				t.Fatalf("admission %d: waiter %d at %v, want waiter %d at %v", j, order[j], at, j, time.Duration(j)*100*time.Millisecond)
			}
		}
		if n := cs.takes.Load(); n != 20 {
			t.Fatalf("%d store calls for 20 waiters, want 20 (one each)", n)
		}
		// one that would wait longer than its MaxWait is refused at once
		res, _ := l.Check(ctx, limiter.Request{Descriptors: d, MaxWait: 50 * time.Millisecond})
		if res.Allowed || res.RetryAfter != 100*time.Millisecond {
			t.Fatalf("over its MaxWait: %+v", res)
		}
	})
}

// A caller whose context ends while it waits gets a refusal, and its
// booking is returned exactly, also with a later booking behind it.
func TestCheckCancelledBookingReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limiterOver(t, bookSrc, memstore.New())
		d := map[string]string{"k": "a"}
		bg := context.Background()
		if res, _ := l.Check(bg, limiter.Request{Descriptors: d}); !res.Allowed { // empty now
			t.Fatal(res)
		}
		ctx, cancel := context.WithCancel(bg)
		done := make(chan limiter.Result)
		go func() {
			res, _ := l.Check(ctx, limiter.Request{Descriptors: d, MaxWait: time.Second})
			done <- res
		}()
		synctest.Wait() // booked, due at 100 ms
		later := make(chan time.Duration)
		go func() {
			t0 := time.Now()
			l.Check(bg, limiter.Request{Descriptors: d, MaxWait: time.Second})
			later <- time.Since(t0)
		}()
		synctest.Wait() // booked behind it, due at 200 ms
		time.Sleep(30 * time.Millisecond)
		cancel()
		if res := <-done; res.Allowed || res.Limits[0].Allowed {
			t.Fatalf("cancelled: %+v", res)
		}
		if w := <-later; w != 200*time.Millisecond {
			t.Fatalf("the later booking kept its place: waited %v, want 200ms", w)
		}
		// the cancelled token is back: at 200 ms the bucket is as if only
		// the later booking had been made (due at 100 ms now, taken), so it
		// holds a token again and a new booking waits 0 (without the
		// return it would wait 100 ms)
		t0 := time.Now()
		if res, _ := l.Check(bg, limiter.Request{Descriptors: d, MaxWait: time.Second}); !res.Allowed || time.Since(t0) != 0 {
			t.Fatalf("after the cancel: %+v, waited %v, want 0", res, time.Since(t0))
		}
	})
}

// Reserve books without sleeping: Result.Wait is the turn; Settle with
// actual 0 before it returns the booking exactly.
func TestCheckReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limiterOver(t, bookSrc, memstore.New())
		ctx := context.Background()
		d := map[string]string{"k": "a"}
		l.Check(ctx, limiter.Request{Descriptors: d}) // empty now
		t0 := time.Now()
		res, err := l.Check(ctx, limiter.Request{Descriptors: d, MaxWait: time.Second, Reserve: true, Receipt: true})
		if err != nil || !res.Allowed || res.Wait != 100*time.Millisecond || time.Since(t0) != 0 {
			t.Fatalf("reserve: %+v %v, after %v", res, err, time.Since(t0))
		}
		next, _ := l.Check(ctx, limiter.Request{Descriptors: d, MaxWait: time.Second, Reserve: true, Receipt: true})
		if next.Wait != 200*time.Millisecond {
			t.Fatalf("the next reservation: %+v", next)
		}
		if err := l.Settle(ctx, res.Receipt, 0); err != nil {
			t.Fatal(err)
		}
		if again, _ := l.Check(ctx, limiter.Request{Descriptors: d, MaxWait: time.Second, Reserve: true}); again.Wait != 200*time.Millisecond {
			t.Fatalf("after returning the first: %+v (want 200ms: one booking ahead)", again)
		}
		if plain, _ := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"k": "b"}, MaxWait: time.Second, Reserve: true}); !plain.Allowed || plain.Wait != 0 {
			t.Fatalf("a reservation admitted now: %+v", plain)
		}
	})
}

// A pause reported for some descriptors holds for every caller: checks are
// refused (bookings wait) until it ends, and the bucket refills from empty
// after it; bad pauses are clear errors and pause nothing.
func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limiterOver(t, llmSrc, memstore.New())
		ctx := context.Background()
		d := map[string]string{"api_key": "k"}
		until, err := l.Pause(ctx, d, 2*time.Second, []string{"tpm"})
		if err != nil || !until.Equal(time.Now().Add(2*time.Second)) {
			t.Fatalf("pause: %v %v", until, err)
		}
		res, _ := l.Check(ctx, limiter.Request{Descriptors: d, Costs: map[string]int64{"tpm": 100}})
		if res.Allowed || res.RetryAfter != 2*time.Second+600*time.Millisecond {
			t.Fatalf("during the pause (100 tokens at 10000/m: 0.6 s after it): %+v", res)
		}
		t0 := time.Now()
		res, _ = l.Check(ctx, limiter.Request{Descriptors: d, Costs: map[string]int64{"tpm": 100}, MaxWait: 5 * time.Second})
		if !res.Allowed || time.Since(t0) != 2600*time.Millisecond {
			t.Fatalf("a booking waits out the pause and the refill: %+v after %v", res, time.Since(t0))
		}
		for _, tc := range []struct {
			d     time.Duration
			names []string
			is    error
		}{
			{0, nil, sluice.ErrInvalidLimit},
			{time.Second, []string{"tokens"}, limiter.ErrUnknownLimit},
			{time.Second, []string{"calls"}, sluice.ErrInvalidLimit},
		} {
			if _, err := l.Pause(ctx, d, tc.d, tc.names); !errors.Is(err, tc.is) {
				t.Errorf("pause %v %v: %v, want %v", tc.d, tc.names, err, tc.is)
			}
		}
		if _, err := l.Pause(ctx, map[string]string{"user": "u"}, time.Second, nil); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("nothing applies: %v", err)
		}
		// every token bucket by default: rpm too
		l.Pause(ctx, map[string]string{"api_key": "j"}, time.Second, nil)
		if res, _ := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"api_key": "j"}, Costs: map[string]int64{"tpm": 0}}); res.Allowed || res.Limits[0].Allowed {
			t.Fatalf("rpm not paused by default: %+v", res)
		}
	})
}

// A receipt settles once (copies too): settling twice would return its
// cost twice. A reservation carries its receipt without asking.
func TestReceiptSettlesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limiterOver(t, llmSrc, memstore.New())
		ctx := context.Background()
		d := map[string]string{"api_key": "k"}
		res, _ := l.Check(ctx, limiter.Request{Descriptors: d, Costs: map[string]int64{"tpm": 400}, Receipt: true})
		copyOf := res.Receipt
		if err := l.Settle(ctx, res.Receipt, 0); err != nil {
			t.Fatal(err)
		}
		for _, r := range []limiter.Receipt{res.Receipt, copyOf} {
			if err := l.Settle(ctx, r, 0); !errors.Is(err, limiter.ErrSettled) {
				t.Fatalf("second settle: %v", err)
			}
		}
		if got := remaining(t, l, "k"); got["tpm"] != 10000 {
			t.Fatalf("tpm after one refund of 400: %d (a second refund would create credit)", got["tpm"])
		}
		l.Check(ctx, limiter.Request{Descriptors: map[string]string{"api_key": "r"}, Costs: map[string]int64{"rpm": 60}})
		rv, _ := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"api_key": "r"}, MaxWait: 5 * time.Second, Reserve: true})
		if !rv.Allowed || rv.Wait != time.Second || rv.Receipt.Empty() {
			t.Fatalf("a reservation without Receipt: %+v", rv)
		}
	})
}

// Pause returns the end of the pause in force: a shorter pause than a
// longer one in force reports the longer one's end.
func TestPauseReportsTheLongerPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limiterOver(t, llmSrc, memstore.New())
		ctx := context.Background()
		d := map[string]string{"api_key": "k"}
		long, _ := l.Pause(ctx, d, 5*time.Second, []string{"rpm"})
		short, err := l.Pause(ctx, d, 100*time.Millisecond, []string{"rpm"})
		if err != nil || short.Sub(long).Abs() > time.Millisecond {
			t.Fatalf("the longer pause's end %v, reported %v (%v)", long, short, err)
		}
		if _, err := l.Pause(ctx, d, 25*time.Hour, nil); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Fatalf("a pause above MaxPause: %v", err)
		}
	})
}

// A held booking's wake-up is measured: sluice_wait_lateness_seconds
// counts one observation per booked Check that slept (and
// sluice_waits_total the limit that made it wait).
func TestWaitMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		l := limiterOver(t, bookSrc, memstore.New(), limiter.WithRegisterer(reg))
		d := map[string]string{"k": "a"}
		l.Check(context.Background(), limiter.Request{Descriptors: d})
		if res, _ := l.Check(context.Background(), limiter.Request{Descriptors: d, MaxWait: time.Second}); !res.Allowed {
			t.Fatal(res)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if h := m.GetHistogram(); h != nil {
					got[mf.GetName()] = h.GetSampleCount()
				} else if c := m.GetCounter(); c != nil && mf.GetName() == "sluice_waits_total" {
					got[mf.GetName()] = uint64(c.GetValue())
				}
			}
		}
		if got["sluice_wait_lateness_seconds"] != 1 || got["sluice_wait_seconds"] != 1 || got["sluice_waits_total"] != 1 {
			t.Fatalf("metrics: %v", got)
		}
	})
}
