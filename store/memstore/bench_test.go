// Benchmarks of the hot path (decisions on existing keys) and of a new key at the cap.
package memstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

func BenchmarkTake1(b *testing.B) {
	s := memstore.New()
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 1e9, Rate: 1e9})
	items := []store.Item{{Key: "tenant:t0", Spec: sp, Cost: 1}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.Take(ctx, items)
	}
}

// Three existing keys in one request (the path that locks several shards).
func BenchmarkTake3(b *testing.B) {
	s := memstore.New()
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 1e9, Rate: 1e9})
	items := []store.Item{{Key: "tenant:t0", Spec: sp, Cost: 1}, {Key: "route:r0", Spec: sp, Cost: 1}, {Key: "global", Spec: sp, Cost: 1}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.Take(ctx, items)
	}
}

// A new key a request at the cap (100,000 keys, none idle): each evicts the
// least recently used key (before LRU eviction: refused with a FullError).
func BenchmarkNewKeyAtCap(b *testing.B) {
	const n = 100_000
	s := memstore.New(memstore.WithMaxKeys(n))
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 1e-6})
	ctx := context.Background()
	keys := make([]string, 2*n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, k := range keys[:n] {
		s.Take(ctx, []store.Item{{Key: k, Spec: sp, Cost: 1}})
	}
	items := make([]store.Item, 1)
	b.ReportAllocs()
	i := n
	for b.Loop() {
		items[0] = store.Item{Key: keys[i], Spec: sp, Cost: 1}
		s.Take(ctx, items)
		if i++; i == len(keys) {
			i = 0
		}
	}
}
