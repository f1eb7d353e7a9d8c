package failover_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/redisstore"
)

const timeout = 150 * time.Millisecond

type rig struct {
	srv  *redistest.Server
	fs   *failover.Store
	reg  *prometheus.Registry
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newRig(t *testing.T, mode string, instances int) *rig {
	t.Helper()
	srv := redistest.New(t)
	rs, err := redisstore.Open("redis://"+srv.Addr, redisstore.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{srv: srv, reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	r.fs, err = failover.New(failover.Config{Primary: rs, Mode: mode, Instances: instances, Timeout: timeout, ProbeInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Registerer: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.fs.Close() })
	return r
}

func spec(t *testing.T, capacity int64, rate float64, mode string) *store.Spec {
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: capacity, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	sp.OnStoreError = mode
	return sp
}

// take takes cost from key and fails the test if the call outlives the
// store's timeout by much (no request hangs on a dead or frozen Redis).
func take(t *testing.T, s store.Store, items ...store.Item) (store.Result, error) {
	t.Helper()
	start := time.Now()
	r, err := s.Take(context.Background(), items)
	if d := time.Since(start); d > timeout+200*time.Millisecond {
		t.Fatalf("Take took %v (timeout %v)", d, timeout)
	}
	return r, err
}

func degradedGauge(r *rig) float64 {
	mfs, _ := r.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "sluice_store_degraded" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// drain takes all of key's tokens in Redis, so that a later refusal shows
// that Redis (not a fallback) decided.
func drain(t *testing.T, r *rig, sp *store.Spec, key string) {
	t.Helper()
	res, err := take(t, r.fs, store.Item{Key: key, Spec: sp, Cost: sp.Capacity()})
	if err != nil || !res.Allowed {
		t.Fatalf("drain: %+v %v", res, err)
	}
}

func waitRecovered(t *testing.T, r *rig, sp *store.Spec, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := take(t, r.fs, store.Item{Key: key, Spec: sp, Cost: 1})
		if err == nil && !res.Allowed && !r.fs.Degraded() {
			break // refused: Redis' drained bucket decided again
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery: %+v %v degraded=%v", res, err, r.fs.Degraded())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g := degradedGauge(r); g != 0 {
		t.Fatalf("gauge %v after recovery", g)
	}
	if !strings.Contains(r.logs.String(), "store reachable again") {
		t.Fatalf("no recovery log: %s", r.logs.String())
	}
}

func TestFailOpenKillAndRestart(t *testing.T) {
	r := newRig(t, failover.FailOpen, 1)
	sp := spec(t, 5, 0.001, "")
	drain(t, r, sp, "k")
	r.srv.Kill()
	for range 20 {
		res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1})
		if err != nil || !res.Allowed {
			t.Fatalf("fail_open refused with Redis down: %+v %v", res, err)
		}
	}
	if g := degradedGauge(r); g != 1 {
		t.Fatalf("gauge %v while down", g)
	}
	if !strings.Contains(r.logs.String(), "store unreachable") {
		t.Fatalf("no degradation log: %s", r.logs.String())
	}
	if got := testutil.ToFloat64(mustCounter(t, r, "fail_open")); got < 20 {
		t.Fatalf("fallback decisions counted: %v", got)
	}
	if err := r.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The restarted Redis is empty: drain again, then it must decide.
	deadline := time.Now().Add(10 * time.Second)
	for r.fs.Degraded() && time.Now().Before(deadline) {
		take(t, r.fs, store.Item{Key: "other", Spec: sp, Cost: 1})
		time.Sleep(20 * time.Millisecond)
	}
	drain(t, r, sp, "k")
	waitRecovered(t, r, sp, "k")
}

func mustCounter(t *testing.T, r *rig, mode string) prometheus.Collector {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_store_fallback_decisions_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == mode {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no fallback counter for %s", mode)
	return nil
}

func TestFailClosedKill(t *testing.T) {
	r := newRig(t, failover.FailClosed, 1)
	sp := spec(t, 5, 1, "")
	if res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1}); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	r.srv.Kill()
	for range 10 {
		if _, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1}); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("fail_closed: %v", err)
		}
	}
	if err := r.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1})
		if err == nil && res.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// local: each of 2 instances enforces half the budget in process.
func TestLocalDividesTheBudget(t *testing.T) {
	r := newRig(t, failover.Local, 2)
	sp := spec(t, 10, 0.001, "")
	r.srv.Kill()
	admitted := 0
	for range 20 {
		res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("local fallback admitted %d of capacity 10 / 2 instances", admitted)
	}
	// A cost above the instance's share is refused, not an error.
	if res, err := take(t, r.fs, store.Item{Key: "k2", Spec: sp, Cost: 7}); err != nil || res.Allowed {
		t.Fatalf("cost over the local share: %+v %v", res, err)
	}
	// In-flight leases in local mode release locally.
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 4, SlotTTL: time.Minute}
	var leases []store.Slots
	for range 3 {
		res, err := take(t, r.fs, store.Item{Key: "c", Spec: conc, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			leases = append(leases, res.Slots)
		}
	}
	if len(leases) != 2 {
		t.Fatalf("local in-flight admitted %d of 4 / 2", len(leases))
	}
	if err := r.fs.Release(context.Background(), leases[0]); err != nil {
		t.Fatal(err)
	}
	if res, _ := take(t, r.fs, store.Item{Key: "c", Spec: conc, Cost: 1}); !res.Allowed {
		t.Fatal("released local slot not reusable")
	}
}

// A limit's own on_store_error overrides the default; fail_closed on any
// limit refuses the whole request.
func TestPerLimitOverride(t *testing.T) {
	r := newRig(t, failover.FailOpen, 1)
	open := spec(t, 5, 1, "")
	closed := spec(t, 5, 1, failover.FailClosed)
	r.srv.Kill()
	if res, err := take(t, r.fs, store.Item{Key: "a", Spec: open, Cost: 1}); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	if _, err := take(t, r.fs, store.Item{Key: "a", Spec: open, Cost: 1}, store.Item{Key: "b", Spec: closed, Cost: 1}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("fail_closed limit in the request: %v", err)
	}
}

// A frozen Redis (SIGSTOP) costs a caller at most the store's timeout,
// after which decisions fall back at once until it answers again.
func TestPausedRedisTimesOut(t *testing.T) {
	r := newRig(t, failover.FailOpen, 1)
	sp := spec(t, 5, 0.001, "")
	drain(t, r, sp, "k")
	r.srv.Pause()
	defer r.srv.Resume()
	start := time.Now()
	for range 50 {
		res, err := take(t, r.fs, store.Item{Key: "k", Spec: sp, Cost: 1})
		if err != nil || !res.Allowed {
			t.Fatalf("%+v %v", res, err)
		}
	}
	// One call waits out the timeout, the rest fall back at once (plus a
	// probe per 100 ms).
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("50 decisions took %v with Redis frozen", d)
	}
	r.srv.Resume()
	waitRecovered(t, r, sp, "k")
}

// In local mode a booking is booked locally, on the instance's share: FIFO
// waits as on the shared store.
func TestLocalBooks(t *testing.T) {
	r := newRig(t, failover.Local, 2)
	sp := spec(t, 10, 1, "") // per instance: 5, at 0.5/s
	r.srv.Kill()
	if res, err := take(t, r.fs, store.Item{Key: "b", Spec: sp, Cost: 5}); err != nil || !res.Allowed {
		t.Fatalf("emptying the local share: %+v %v", res, err)
	}
	items := []store.Item{{Key: "b", Spec: sp, Cost: 1, MaxWait: 3 * time.Second}}
	res, err := r.fs.Take(context.Background(), items)
	// (the rig's clock is real: the wait is 2 s less what has elapsed
	// since the bucket was emptied)
	if w := items[0].Wait; err != nil || !res.Allowed || w > 2*time.Second || w < time.Second || res.Wait != w {
		t.Fatalf("a local booking waits for the local share's refill (1 token at 0.5/s): %+v %+v %v", res, items[0], err)
	}
	items = []store.Item{{Key: "b", Spec: sp, Cost: 5, MaxWait: 3 * time.Second}}
	if res, err := r.fs.Take(context.Background(), items); err != nil || res.Allowed || items[0].Wait != 0 {
		t.Fatalf("a booking beyond MaxWait (12 s) is refused: %+v %+v %v", res, items[0], err)
	}
}
