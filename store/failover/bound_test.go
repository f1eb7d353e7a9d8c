// Tests of the bounds on calls to a frozen Redis, the circuit, the book
// wrapper, and local mode's levels across a Redis restarted empty.
package failover_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/book/booktest"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/redisstore"
)

// rigBook is the rig's failover store with a book on its Redis.
func rigBook(t *testing.T, r *rig) *failover.Book {
	t.Helper()
	rs, err := redisstore.Open("redis://"+r.srv.Addr, redisstore.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return failover.NewBook(r.fs, redisstore.NewBook(rs, book.Config{}), book.Config{})
}

// With Redis up the wrapped book follows the book rules.
func TestBookConformance(t *testing.T) {
	booktest.Run(t, func(t *testing.T, cfg book.Config) book.Book {
		r := newRig(t, failover.FailOpen, 1)
		rs, err := redisstore.Open("redis://"+r.srv.Addr, redisstore.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		return failover.NewBook(r.fs, redisstore.NewBook(rs, cfg), cfg)
	})
}

// A frozen Redis (SIGSTOP) under 16 concurrent callers (each pausing 1 ms
// between calls, so that the measure is not of the scheduler): no Take outlives
// the timeout by more than 50 ms, including the callers that queued
// behind the calls in flight when it froze (redisstore batches them into
// a call of their own, sent when those time out); the circuit then keeps
// every call off the primary, so that decisions are at once.
func TestFrozenRedisBoundsEveryCaller(t *testing.T) {
	r := newRig(t, failover.FailOpen, 1)
	sp := spec(t, 1_000_000, 1_000_000, "")
	if res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1}); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	r.srv.Pause()
	defer r.srv.Resume()
	var mu sync.Mutex
	var worst time.Duration
	var slow int
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				start := time.Now()
				res, err := r.fs.Take(context.Background(), []store.Item{{Key: "k" + string(rune('a'+g)), Spec: sp, Cost: 1}})
				d := time.Since(start)
				mu.Lock()
				worst = max(worst, d)
				if d > timeout/2 {
					slow++
				}
				mu.Unlock()
				if err != nil || !res.Allowed {
					t.Errorf("fail_open with Redis frozen: %+v %v", res, err)
					return
				}
				time.Sleep(time.Millisecond) // (callers that leave the CPU to the others, as network clients do)
			}
		}()
	}
	wg.Wait()
	t.Logf("slowest Take %v (timeout %v); %d took over half of it", worst, timeout, slow)
	if worst > timeout+50*time.Millisecond {
		t.Fatalf("a Take took %v with Redis frozen, timeout %v", worst, timeout)
	}
	if slow > 16 {
		t.Fatalf("%d Takes waited on the frozen Redis: only those in flight when it froze may", slow)
	}
	if !r.fs.Degraded() {
		t.Fatal("not degraded")
	}
	// Ping (readyz) answers at once while degraded.
	start := time.Now()
	if err := r.fs.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) || time.Since(start) > 10*time.Millisecond {
		t.Fatalf("Ping while degraded: %v after %v", err, time.Since(start))
	}
	r.srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for r.fs.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("no recovery after SIGCONT")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The book's calls are bounded too; while degraded nothing is sent: a
// request_id is claimed in process, a lease recorded in process (its id
// usable: Slots, TakeReceipt), and a lease recorded on Redis answers
// store.ErrUnavailable at once.
func TestBookFollowsTheCircuit(t *testing.T) {
	r := newRig(t, failover.FailOpen, 1)
	b := rigBook(t, r)
	ctx := context.Background()
	shared, err := b.AddRecord(ctx, book.Record{Slots: store.Slots{ID: "s1", Keys: []string{"c:1"}}, SlotsTTL: time.Minute, Receipt: []byte("rc")})
	if err != nil || strings.HasPrefix(shared, "local~") {
		t.Fatalf("AddRecord with Redis up: %q %v", shared, err)
	}
	r.srv.Pause()
	defer r.srv.Resume()
	bounded := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		if d := time.Since(start); d > timeout+50*time.Millisecond {
			t.Fatalf("%s took %v with Redis frozen (timeout %v)", what, d, timeout)
		}
	}
	var id string
	bounded("AddRecord (the call that finds Redis frozen)", func() {
		id, err = b.AddRecord(ctx, book.Record{Slots: store.Slots{ID: "s2", Keys: []string{"c:2"}}, SlotsTTL: time.Minute, Receipt: []byte("rc2")})
	})
	if err != nil || !strings.HasPrefix(id, "local~") {
		t.Fatalf("a lease whose record Redis could not take is recorded in process: %q %v", id, err)
	}
	if !r.fs.Degraded() {
		t.Fatal("a book call that timed out did not open the circuit")
	}
	bounded("Begin", func() {
		if _, owner, err := b.Begin(ctx, "req-1", "fp"); !owner || err != nil {
			t.Fatalf("Begin while degraded: owner %v, %v", owner, err)
		}
	})
	b.Finish(ctx, "req-1", "fp", []byte("answer"))
	if ans, owner, err := b.Begin(ctx, "req-1", "fp"); owner || err != nil || string(ans) != "answer" {
		t.Fatalf("a retry while degraded gets the answer kept in process: %q %v %v", ans, owner, err)
	}
	bounded("Slots of a local lease", func() {
		if l, err := b.Slots(ctx, id); err != nil || l.ID != "s2" {
			t.Fatalf("Slots of a lease recorded in process: %+v %v", l, err)
		}
	})
	if rc, err := b.TakeReceipt(ctx, id, nil); err != nil || string(rc) != "rc2" {
		t.Fatalf("TakeReceipt of a lease recorded in process: %q %v", rc, err)
	}
	bounded("Slots of a Redis lease", func() {
		if _, err := b.Slots(ctx, shared); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Slots of a Redis lease while degraded: %v", err)
		}
	})
	bounded("TakeReceipt of a Redis lease", func() {
		if _, err := b.TakeReceipt(ctx, shared, func([]byte) error { return nil }); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("TakeReceipt of a Redis lease while degraded: %v", err)
		}
	})
	r.srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for r.fs.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("no recovery after SIGCONT")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Back on Redis: both leases are usable, each where it was recorded.
	if l, err := b.Slots(ctx, shared); err != nil || l.ID != "s1" {
		t.Fatalf("Slots of the Redis lease after recovery: %+v %v", l, err)
	}
	if l, err := b.Slots(ctx, id); err != nil || l.ID != "s2" {
		t.Fatalf("Slots of the local lease after recovery: %+v %v", l, err)
	}
}

// Local mode, one instance: the local bucket starts from the level Redis
// last reported (not full), and a Redis restarted empty gets the local
// level before any decision (not full again).
func TestLocalLevelsAcrossAnEmptyRestart(t *testing.T) {
	r := newRig(t, failover.Local, 1)
	sp := spec(t, 10, 0.001, "")
	if res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 7}); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	r.srv.Kill()
	admitted := 0
	for range 10 {
		if res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1}); err != nil {
			t.Fatal(err)
		} else if res.Allowed {
			admitted++
		}
	}
	if admitted != 3 || !r.fs.Degraded() {
		t.Fatalf("local admitted %d with Redis down after it reported 3 left, want 3 (degraded %v)", admitted, r.fs.Degraded())
	}
	// A key Redis never reported starts full.
	if res, err := take(t, r.fs, store.Item{Key: "new", Spec: sp, Cost: 10}); err != nil || !res.Allowed {
		t.Fatalf("a new key locally: %+v %v", res, err)
	}
	if err := r.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.fs.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("no recovery after the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The empty Redis was lowered to the local levels: both keys drained.
	for _, key := range []string{"k", "new"} {
		if res, err := take(t, r.fs, store.Item{Key: key, Spec: sp, Cost: 1}); err != nil || res.Allowed {
			t.Fatalf("%s on the restarted Redis: %+v %v (want refused: handed back drained)", key, res, err)
		}
	}
	if res, err := take(t, r.fs, store.Item{Key: "other", Spec: sp, Cost: 10}); err != nil || !res.Allowed {
		t.Fatalf("a key not used during the outage: %+v %v", res, err)
	}
}

// A racing retry on a healthy Redis (its first request still deciding)
// waits at most the timeout, is told the first did not finish, and does not
// open the circuit.
func TestBookRacingRetryIsNotAnOutage(t *testing.T) {
	r := newRig(t, failover.FailOpen, 1)
	b := rigBook(t, r)
	ctx := context.Background()
	if _, owner, err := b.Begin(ctx, "race", "fp"); !owner || err != nil {
		t.Fatalf("first claim: owner %v, %v", owner, err)
	}
	start := time.Now()
	ans, owner, err := b.Begin(ctx, "race", "fp")
	if d := time.Since(start); d > timeout+50*time.Millisecond {
		t.Fatalf("a racing retry waited %v (timeout %v)", d, timeout)
	}
	if ans != nil || owner || err != nil {
		t.Fatalf("a racing retry past the timeout: %q, owner %v, %v (want: did not finish)", ans, owner, err)
	}
	time.Sleep(2 * timeout) // (the background ping)
	if r.fs.Degraded() {
		t.Fatal("a racing retry opened the circuit on a healthy Redis")
	}
	b.Finish(ctx, "race", "fp", []byte("first"))
	if ans, owner, err := b.Begin(ctx, "race", "fp"); owner || err != nil || string(ans) != "first" {
		t.Fatalf("a retry after the first finished: %q, owner %v, %v", ans, owner, err)
	}
}
