package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
)

// quotaSpecs are calendar quotas of every period, in UTC and in a zone
// with daylight-saving changes.
func quotaSpecs(t *testing.T) []*store.Spec {
	t.Helper()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	var specs []*store.Spec
	for _, q := range []quota.Limit{
		{Limit: 50, Period: quota.Day},
		{Limit: 50, Period: quota.Day, Location: berlin},
		{Limit: 300, Period: quota.Week, Location: berlin},
		{Limit: 1000, Period: quota.Month, Location: berlin},
		{Limit: 1 << 40, Period: quota.Month},
		{Limit: 5000, Period: quota.Year, Location: berlin},
	} {
		sp, err := store.NewSpec(store.Limit{Kind: store.Quota, Quota: q})
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, sp)
	}
	return specs
}

// memstore and Redis decide a random trace of quotas identically, over
// periods that include the spring and the autumn daylight-saving days of
// Europe/Berlin and a month's and a year's boundary; settles (refunds and
// charges) and quotas with a block_for included.
func TestQuotaIdenticalToMemstore(t *testing.T) {
	for _, start := range []string{"2026-03-27T18:00:00+01:00", "2026-10-23T18:00:00+02:00", "2026-12-29T12:00:00+01:00"} {
		t.Run(start, func(t *testing.T) {
			t0, _ := time.Parse(time.RFC3339, start)
			clock := sluice.NewManualClock(t0)
			rs := open(t, redisstore.WithScriptClock(clock))
			ms := memstore.New(memstore.WithClock(clock))
			specs := quotaSpecs(t)
			for i, d := range []time.Duration{time.Hour, 90 * time.Minute} { // the penalty box too
				c := *specs[i]
				c.BlockFor = d
				specs = append(specs, &c)
			}
			rng := rand.New(rand.NewPCG(13, uint64(t0.Unix())))
			ctx := context.Background()
			steps := []time.Duration{0, 1, time.Millisecond, time.Second, 7 * time.Minute, time.Hour, 5 * time.Hour}
			refund := map[string]int64{}
			refused, resets := 0, 0
			defer func() {
				if refused == 0 || resets == 0 {
					t.Errorf("the trace must see refusals (%d) and new periods (%d)", refused, resets)
				}
			}()
			last := map[string]int64{}
			classes := rand.New(rand.NewPCG(14, uint64(t0.Unix()))) // priority classes' reserves (a stream of their own)
			for step := range 1500 {
				clock.Advance(steps[rng.IntN(len(steps))] + time.Duration(rng.Int64N(1000)))
				var a, b []store.Item
				reserve := []uint32{0, 0, 0, 250_000, 500_000, 999_999}[classes.IntN(6)]
				for j, sp := range specs {
					if rng.IntN(2) != 0 {
						continue
					}
					cost := rng.Int64N(min(sp.Capacity(), 20) + 1)
					it := withinClass(store.Item{Key: fmt.Sprint("q", j), Spec: sp, Cost: cost, Reserve: reserve})
					a, b = append(a, it), append(b, it)
				}
				if len(a) == 0 {
					continue
				}
				if rng.IntN(8) == 0 {
					it := a[rng.IntN(len(a))]
					delta := []int64{-it.Cost, -3, rng.Int64N(30) + 1}[rng.IntN(3)]
					adj := []store.Adjustment{{Key: it.Key, Spec: it.Spec, Delta: delta, RefundBefore: refund[it.Key]}}
					if err := ms.Adjust(ctx, adj); err != nil {
						t.Fatal(err)
					}
					if err := rs.Adjust(ctx, adj); err != nil {
						t.Fatal(err)
					}
				}
				ra, err := ms.Take(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				rb, err := rs.Take(ctx, b)
				if err != nil {
					t.Fatal(err)
				}
				if ra.Allowed != rb.Allowed {
					t.Fatalf("step %d at %v: memstore allowed %v, redis %v", step, clock.Now(), ra.Allowed, rb.Allowed)
				}
				for i := range a {
					if !a[i].Decision.Allowed {
						refused++
					}
					if p, ok := last[a[i].Key]; ok && a[i].Decision.Remaining > p {
						resets++
					}
					last[a[i].Key] = a[i].Decision.Remaining
					if a[i].RefundBefore != 0 {
						refund[a[i].Key] = a[i].RefundBefore
					}
					if a[i].Decision != b[i].Decision || a[i].RefundBefore != b[i].RefundBefore {
						t.Fatalf("step %d at %v item %s cost %d: memstore %+v (%d), redis %+v (%d)", step, clock.Now(), a[i].Key, a[i].Cost,
							a[i].Decision, a[i].RefundBefore, b[i].Decision, b[i].RefundBefore)
					}
				}
			}
		})
	}
}
