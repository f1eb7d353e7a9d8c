// Failover over the refusal cache (store/refusal), in sluice serve's order:
// Redis, the cache, failover.

package failover_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/refusal"
)

// While Redis answers, the cache refuses a drained key's repeats without a
// call; when Redis stops answering, a request the cache would refuse past
// its liveness window pings Redis, and the error opens failover's circuit
// even though no request reached Redis; failover then decides by
// on_store_error without calling the cache (fail_open admits the key the
// cache holds refused), and its probe (Ping, through the cache) brings
// Redis back.
func TestFailoverOverRefusalCache(t *testing.T) {
	srv := redistest.New(t)
	rs, err := redisstore.Open("redis://"+srv.Addr, redisstore.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	rc := refusal.New(rs, 1000)
	fs, err := failover.New(failover.Config{Primary: rc, Mode: failover.FailOpen, Timeout: timeout, ProbeInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	sp := spec(t, 5, 0.001, "")
	res, err := take(t, fs, store.Item{Key: "k", Spec: sp, Cost: 5})
	if err != nil || !res.Allowed {
		t.Fatalf("drain: %+v %v", res, err)
	}
	for range 3 {
		if res, err := take(t, fs, store.Item{Key: "k", Spec: sp, Cost: 1}); err != nil || res.Allowed {
			t.Fatalf("a drained key: %+v %v", res, err)
		}
	}
	if rc.Stats().Hits != 2 { // (the first, of a smaller cost than the drain's, is Redis's)
		t.Fatalf("hits %d, want 2", rc.Stats().Hits)
	}
	srv.Kill()
	// Only requests the cache refuses: past its liveness window it pings
	// Redis, fails, and failover opens the circuit (fail_open).
	time.Sleep(refusal.DefaultLiveness + 50*time.Millisecond)
	hits := rc.Stats().Hits
	for range 5 {
		if res, err := take(t, fs, store.Item{Key: "k", Spec: sp, Cost: 1}); err != nil || !res.Allowed {
			t.Fatalf("rule: while degraded failover decides (fail_open), not the cache: %+v %v", res, err)
		}
	}
	if rc.Stats().Hits != hits || !fs.Degraded() {
		t.Fatalf("the cache answered while Redis was down (degraded %v)", fs.Degraded())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for fs.Degraded() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if fs.Degraded() {
		t.Fatal("no recovery: the probe goes through the cache's Ping")
	}
	if err := fs.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
