package memstore_test

import (
	"context"
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
