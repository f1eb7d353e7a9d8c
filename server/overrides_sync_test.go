// Tests of the sync loop's timing (testing/synctest): an announced change
// is read at once, a burst once per watchGap, an unannounced one at the
// next poll, exactly one period after the last read; one store call per
// period when idle.

package server_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

// announcing is a MemStore that announces its changes as
// server.OverridesWatcher says (while announce is set), counting Changes
// calls.
type announcing struct {
	*overrides.MemStore
	announce atomic.Bool
	changes  atomic.Int64
	mu       sync.Mutex
	watchers []func()
}

var _ server.OverridesWatcher = (*announcing)(nil)

func (a *announcing) Watch(ctx context.Context, changed func(), _ func(error)) error {
	a.mu.Lock()
	a.watchers = append(a.watchers, changed)
	a.mu.Unlock()
	changed() // (subscribed)
	<-ctx.Done()
	return ctx.Err()
}

func (a *announcing) Put(ctx context.Context, o overrides.Override) (overrides.Override, error) {
	stored, err := a.MemStore.Put(ctx, o)
	a.told(err)
	return stored, err
}

func (a *announcing) Changes(ctx context.Context, since uint64) (overrides.Changes, error) {
	a.changes.Add(1)
	return a.MemStore.Changes(ctx, since)
}

func (a *announcing) told(err error) {
	if err != nil || !a.announce.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range a.watchers {
		f()
	}
}

// syncServer is a server on ovPolicy whose overrides are kept in st.
func syncServer(t *testing.T, st overrides.Store) (*server.Server, *overrides.Set) {
	t.Helper()
	p, err := policy.Parse([]byte(ovPolicy))
	if err != nil {
		t.Fatal(err)
	}
	set := overrides.NewSet(p)
	reg := prometheus.NewRegistry()
	l, err := limiter.New(p, memstore.New(), limiter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Limiter: l, Gatherer: reg, Registerer: reg, Overrides: set, OverrideStore: st,
		LoopbackListener: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s, set
}

func TestSyncOverridesTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, err := overrides.NewMemStore(overrides.MemOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := &announcing{MemStore: ms}
		st.announce.Store(true)
		srv, set := syncServer(t, st)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { srv.SyncOverrides(ctx, time.Second); close(done) }()
		defer func() { cancel(); <-done }()
		synctest.Wait() // (subscribed: one read at once)
		if n := st.changes.Load(); n != 1 {
			t.Fatalf("%d Changes at the subscription's start, want 1", n)
		}
		held := func(tenant string) bool {
			return set.Resolve("tenant_api", map[string]string{"tenant": tenant}, time.Now()) != nil
		}
		put := func(tenant string) {
			o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": tenant}, Params: overrides.Params{Capacity: 5}}
			o.Stamp(time.Now(), time.Time{})
			if _, err := st.Put(ctx, o); err != nil {
				t.Fatal(err)
			}
		}

		// Announced, 50 ms after the last read: applied at once.
		time.Sleep(100 * time.Millisecond)
		put("a")
		synctest.Wait()
		if !held("a") {
			t.Fatal("an announced change is not applied at once")
		}
		// A burst: read once, one watchGap (50 ms) after the last read.
		start := time.Now()
		n0 := st.changes.Load()
		for i := range 20 {
			put(string(rune('b' + i)))
		}
		time.Sleep(49 * time.Millisecond)
		if held("b") || st.changes.Load() != n0 {
			t.Fatal("a burst read before watchGap has passed since the last read")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !held("b") || !held("u") || st.changes.Load() != n0+1 {
			t.Fatalf("a burst of 20 after %v: b %v, u %v, %d reads", time.Since(start), held("b"), held("u"), st.changes.Load()-n0)
		}

		// Unannounced (a lost message): read one period after the last
		// read, not before.
		st.announce.Store(false)
		last := time.Now()
		put("lost")
		time.Sleep(time.Until(last.Add(time.Second)) - time.Nanosecond)
		if held("lost") {
			t.Fatal("read before the period")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !held("lost") {
			t.Fatal("an unannounced change is not read one period after the last read")
		}

		// Idle: one read a period.
		n0 = st.changes.Load()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := st.changes.Load() - n0; n != 10 {
			t.Fatalf("%d reads in 10 idle periods, want 10", n)
		}
	})
}

// Without announcements (a MemStore), the loop is a poll every period.
func TestSyncOverridesPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, err := overrides.NewMemStore(overrides.MemOptions{})
		if err != nil {
			t.Fatal(err)
		}
		srv, set := syncServer(t, ms)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { srv.SyncOverrides(ctx, time.Second); close(done) }()
		defer func() { cancel(); <-done }()
		o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "a"}, Params: overrides.Params{Capacity: 5}}
		o.Stamp(time.Now(), time.Time{})
		if _, err := ms.Put(ctx, o); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second - time.Nanosecond)
		if set.Count("tenant_api") != 0 {
			t.Fatal("read before the first period")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if set.Count("tenant_api") != 1 {
			t.Fatal("not read after the first period")
		}
	})
}
