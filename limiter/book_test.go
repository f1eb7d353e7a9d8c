package limiter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
