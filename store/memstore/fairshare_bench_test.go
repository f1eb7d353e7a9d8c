// Benchmarks of a fair-share key's decision (beside BenchmarkTake1).
package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// One fair-share key, 16 tenants in turn: uncontended (a bucket that
// never runs low: the set's touch and expiry only) and contended (a bucket
// always below half: the share decided too).
func BenchmarkTakeFairShare(b *testing.B) {
	for _, c := range []struct {
		name     string
		capacity int64
		rate     float64
	}{{"uncontended", 1e9, 1e9}, {"contended", 100, 10}} {
		b.Run(c.name, func(b *testing.B) {
			s := memstore.New()
			sp := storetest.ShareSpec(b, c.capacity, c.rate, 10*time.Second, 10_000)
			var tenants [16]string
			for i := range tenants {
				tenants[i] = "t" + strconv.Itoa(i)
			}
			items := []store.Item{{Key: "provider:p", Spec: sp, Cost: 1}}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				items[0].Tenant = tenants[i&15]
				i++
				s.Take(ctx, items)
			}
		})
	}
}
