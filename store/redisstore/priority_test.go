package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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
	}{{500_000, true}, {500_000, true}, {500_000, false}, {0, true}, {999_999, false}, {0, true}, {0, false}} {
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
