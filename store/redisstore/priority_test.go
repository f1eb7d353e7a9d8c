package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// An in-flight cap's slots under priority classes, on memstore and Redis
// alike: a class with reserve 0.5 of 4 slots fills 2, a class with none
// the other 2; a class's refusal says so on both.
func TestReservedSlotsIdenticalToMemstore(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	rs := open(t, redisstore.WithScriptClock(clock))
	ms := memstore.New(memstore.WithClock(clock))
	sp := &store.Spec{Kind: store.Concurrency, MaxInFlight: 4, SlotTTL: time.Minute}
	ctx := context.Background()
	for i, c := range []struct {
		reserve uint32
		want    bool
	}{{500_000, true}, {500_000, true}, {500_000, false}, {0, true}, {0, true}, {0, false}} {
		var got [2]store.Item
		for k, s := range []store.Store{ms, rs} {
			items := []store.Item{{Key: "slots", Spec: sp, Cost: 1, Reserve: c.reserve}}
			res, err := s.Take(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != c.want {
				t.Fatalf("take %d (reserve %d) on %T: allowed %v, want %v", i, c.reserve, s, res.Allowed, c.want)
			}
			got[k] = items[0]
		}
		if fmt.Sprint(got[0].Decision) != fmt.Sprint(got[1].Decision) {
			t.Fatalf("take %d: memstore %+v, redis %+v", i, got[0].Decision, got[1].Decision)
		}
	}
}

// The proof of priority classes, on one Redis shared by two
// instances (each its own store client and limiter), on the script's
// manual clock: batch floods at 10x the refill, interactive sends 20 % of
// it, alternating between the instances. Interactive is admitted every
// time; batch gets the rest; what is admitted is at least 95 % of the
// refill r·t and never beyond B + r·t.
func TestPrioritiesTwoInstances(t *testing.T) {
	p, err := policy.Parse([]byte(`
priorities:
  - name: interactive
  - name: batch
    reserve: 0.5
    max_queue_ms: 0
limits:
  - name: provider
    key: "provider"
    capacity: 100
    refill_per_second: 100
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(storetest.Epoch)
	pre := redisstore.WithPrefix(prefix())
	var ls [2]*limiter.Limiter
	for i := range ls {
		s := open(t, redisstore.WithScriptClock(clock), pre)
		if ls[i], err = limiter.New(p, s); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	const ms = 3000 // 3 s, one batch call a ms (1000/s), interactive every 50 ms (20/s)
	var inter, interOK, batch, batchOK int64
	for step := range ms {
		clock.Advance(time.Millisecond)
		for _, class := range []string{"batch", "interactive"} {
			if class == "interactive" && step%50 != 0 {
				continue
			}
			res, err := ls[step%2].Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: 1, Priority: class})
			if err != nil {
				t.Fatal(err)
			}
			if class == "batch" {
				batch++
				if res.Allowed {
					batchOK++
				}
			} else {
				inter++
				if res.Allowed {
					interOK++
				}
			}
		}
	}
	total, bound := batchOK+interOK, int64(100+100*ms/1000)
	t.Logf("interactive %d/%d, batch %d/%d, total %d (B + r·t = %d)", interOK, inter, batchOK, batch, total, bound)
	if interOK != inter {
		t.Errorf("interactive admitted %d of %d, want all", interOK, inter)
	}
	if refill := int64(100 * ms / 1000); total > bound || total < refill*95/100 {
		t.Errorf("admitted %d, want at least 95 %% of r·t = %d and at most B + r·t = %d", total, refill, bound)
	}
	if batchOK < total-inter-1 {
		t.Errorf("batch got %d, want the rest (%d)", batchOK, total-inter)
	}
}
