// What an answer from the cache costs.

package refusal_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/refusal"
)

// BenchmarkHit is a refused request answered from the cache: one key
// (serial), and 1,000 keys from every P (parallel).
func BenchmarkHit(b *testing.B) {
	sp := mustSpec(b, bucketLimit(1, 0.0001))
	s := refusal.New(memstore.New(), refusal.DefaultEntries)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant:", i)
		for range 2 {
			s.Take(context.Background(), []store.Item{{Key: keys[i], Spec: sp, Cost: 1}})
		}
	}
	b.Run("serial", func(b *testing.B) {
		items := make([]store.Item, 1)
		b.ReportAllocs()
		for b.Loop() {
			items[0] = store.Item{Key: keys[0], Spec: sp, Cost: 1}
			if r, _ := s.Take(context.Background(), items); r.Allowed {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			items := make([]store.Item, 1)
			i := 0
			for pb.Next() {
				items[0] = store.Item{Key: keys[i%len(keys)], Spec: sp, Cost: 1}
				s.Take(context.Background(), items)
				i++
			}
		})
	})
	if s.Stats().Hits < uint64(b.N) {
		b.Fatalf("hits %d", s.Stats().Hits)
	}
}
