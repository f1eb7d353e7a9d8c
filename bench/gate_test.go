package bench

import (
	"context"
	"testing"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
)

// The gate's job done with the usual parts: x/time/rate's Wait for the
// tokens, then a weighted semaphore for the in-flight cap.
type xrateSem struct {
	l *rate.Limiter
	s *semaphore.Weighted
}

func (x xrateSem) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := x.l.Wait(ctx); err != nil {
		return err
	}
	if err := x.s.Acquire(ctx, 1); err != nil {
		return err
	}
	defer x.s.Release(1)
	return fn(ctx)
}

func nop(context.Context) error { return nil }

// BenchmarkGateDo: a no-op call admitted through a gate that never runs out
// of tokens (1e9/s) with an in-flight cap of 16, from one goroutine
// ("uncontended") and from 64.
func BenchmarkGateDo(b *testing.B) {
	for _, par := range []int{1, 64} {
		name := "uncontended"
		if par > 1 {
			name = "goroutines=64"
		}
		b.Run(name+"/impl=sluice", func(b *testing.B) {
			g, err := gate.New(gate.Config{Limit: bucket.Limit{Capacity: 1e9, Rate: 1e9}, MaxInFlight: 16, MaxQueue: 64})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			run(b, par, func() {
				if err := g.Do(ctx, 1, nop); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run(name+"/impl=xrate", func(b *testing.B) {
			x := xrateSem{rate.NewLimiter(1e9, 1e9), semaphore.NewWeighted(16)}
			ctx := context.Background()
			run(b, par, func() {
				if err := x.Do(ctx, nop); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

func run(b *testing.B, par int, f func()) {
	b.ReportAllocs()
	if par == 1 {
		for b.Loop() {
			f()
		}
		return
	}
	b.SetParallelism((par + 1) / 2) // GOMAXPROCS is 2 here: 64 goroutines
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f()
		}
	})
}
