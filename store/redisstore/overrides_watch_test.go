// Tests of the overrides' announcements on a real Redis and Redis
// Cluster: a change through one store is heard by another's Watch at
// once, a dropped subscription is taken again, a closed store ends it.

package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/overrides/overridetest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// watcher runs x.Watch for the test, counting its calls.
type watcher struct {
	changed chan struct{}
	mu      sync.Mutex
	fails   []error
	stop    context.CancelFunc
	done    chan error
}

func watch(t *testing.T, x *redisstore.Overrides) *watcher {
	t.Helper()
	w := &watcher{changed: make(chan struct{}, 1000), done: make(chan error, 1)}
	wctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	go func() {
		w.done <- x.Watch(wctx, func() { w.changed <- struct{}{} }, func(err error) {
			w.mu.Lock()
			w.fails = append(w.fails, err)
			w.mu.Unlock()
		})
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	w.next(t, "the subscription's start", 5*time.Second)
	return w
}

// next waits for one call of changed, at most within.
func (w *watcher) next(t *testing.T, what string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-w.changed:
		return time.Since(start)
	case <-time.After(within):
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("no announcement of %s within %v (failures: %v)", what, within, w.fails)
		return 0
	}
}

// drain forgets the calls of changed so far, after a moment for those
// under way.
func (w *watcher) drain() {
	time.Sleep(50 * time.Millisecond)
	for {
		select {
		case <-w.changed:
		default:
			return
		}
	}
}

// quiet checks that changed is not called for a while.
func (w *watcher) quiet(t *testing.T, what string) {
	t.Helper()
	select {
	case <-w.changed:
		t.Fatalf("an announcement after %s", what)
	case <-time.After(100 * time.Millisecond):
	}
}

func testWatch(t *testing.T, open func(t *testing.T, p string) *redisstore.Store) {
	p := prefix()
	a := open(t, p).Overrides(redisstore.OverridesOptions{})
	b := open(t, p).Overrides(redisstore.OverridesOptions{})
	other := open(t, prefix()).Overrides(redisstore.OverridesOptions{})
	w := watch(t, b)
	if !strings.HasSuffix(b.Channel(), redisstore.OverridesTag+":changed") || b.Channel() != a.Channel() || b.Channel() == other.Channel() {
		t.Fatalf("channels %q %q %q", a.Channel(), b.Channel(), other.Channel())
	}
	o := overridetest.Record("l", "acme", 5, 0)
	start := time.Now()
	if _, err := a.Put(ctx, o); err != nil {
		t.Fatal(err)
	}
	w.next(t, "a Put", time.Second)
	t.Logf("a Put through A heard by B's Watch %v after it was sent", time.Since(start).Round(time.Microsecond))
	if err := a.Delete(ctx, "l", o.Match); err != nil {
		t.Fatal(err)
	}
	w.next(t, "a Delete", time.Second)
	// What changes nothing says nothing: a Delete of nothing, a Put
	// refused at the cap, a Changes, another prefix's Put.
	if err := a.Delete(ctx, "l", o.Match); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatal(err)
	}
	full := open(t, p).Overrides(redisstore.OverridesOptions{Max: 1})
	if _, err := full.Put(ctx, overridetest.Record("l", "one", 5, 0)); err != nil {
		t.Fatal(err)
	}
	w.next(t, "a Put", time.Second)
	if _, err := full.Put(ctx, overridetest.Record("l", "two", 5, 0)); !errors.Is(err, overrides.ErrTooMany) {
		t.Fatal(err)
	}
	if _, err := a.Changes(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, o); err != nil {
		t.Fatal(err)
	}
	w.quiet(t, "changes that change nothing of B's store")
}

func TestOverridesWatch(t *testing.T) {
	testWatch(t, func(t *testing.T, p string) *redisstore.Store { return openPrefix(t, p) })
}

// On a cluster the subscription is on any node, the store's keys on one.
func TestOverridesClusterWatch(t *testing.T) {
	testWatch(t, openClusterPrefix)
}

// A subscription killed (CLIENT KILL TYPE pubsub, a failover, a network
// cut) is taken again, and so is one lost while Redis is down once it is
// back; each start is announced, standing for the messages lost
// meanwhile.
func TestOverridesWatchResubscribes(t *testing.T) {
	r := startRedis(t)
	st, err := redisstore.Open("redis://"+r.Addr, redisstore.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := st.Overrides(redisstore.OverridesOptions{})
	w := watch(t, x)
	for i := range 3 {
		w.drain()
		if _, err := redistest.Do(r.Addr, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
		took := w.next(t, "the subscription taken again", 2*time.Second)
		t.Logf("kill %d: subscribed again after %v", i, took.Round(time.Millisecond))
	}
	if _, err := x.Put(ctx, overridetest.Record("l", "acme", 5, 0)); err != nil {
		t.Fatal(err)
	}
	w.next(t, "a Put after the kills", time.Second)

	// Redis down: attempts fail (with a backoff) and take nothing else
	// down; Redis back: subscribed again.
	r.Kill()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if _, err := x.Changes(ctx, 0); err == nil {
		t.Fatal("Changes with Redis down")
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("Changes with Redis down took %v", d)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	w.next(t, "the subscription taken again after a restart", 10*time.Second)
	w.mu.Lock()
	t.Logf("failures reported: %v", w.fails)
	w.mu.Unlock()
	if _, err := x.Put(ctx, overridetest.Record("l", "acme", 5, 0)); err != nil {
		t.Fatal(err)
	}
	w.next(t, "a Put after the restart", time.Second)
}

// Closing the store (or the overrides store) ends Watch with ErrClosed.
func TestOverridesWatchClosed(t *testing.T) {
	st := openPrefix(t, prefix())
	x := st.Overrides(redisstore.OverridesOptions{})
	done := make(chan error, 1)
	go func() { done <- x.Watch(ctx, func() {}, nil) }()
	time.Sleep(100 * time.Millisecond)
	st.Close()
	select {
	case err := <-done:
		if !errors.Is(err, overrides.ErrClosed) {
			t.Fatalf("Watch after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch still runs after the store's Close")
	}
}
