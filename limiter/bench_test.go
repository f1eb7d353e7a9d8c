package limiter_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

func BenchmarkCheck1(b *testing.B) {
	p, _ := policy.Parse([]byte("limits:\n  - name: tenant\n    key: \"tenant:{tenant}\"\n    capacity: 1000000000\n    refill_per_second: 1000000000\n"))
	l, _ := limiter.New(p, memstore.New())
	req := limiter.Request{Descriptors: map[string]string{"tenant": "0000001"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l.Check(ctx, req)
	}
}

func BenchmarkCheckInto1(b *testing.B) {
	p, _ := policy.Parse([]byte("limits:\n  - name: tenant\n    key: \"tenant:{tenant}\"\n    capacity: 1000000000\n    refill_per_second: 1000000000\n"))
	l, _ := limiter.New(p, memstore.New())
	req := limiter.Request{Descriptors: map[string]string{"tenant": "0000001"}}
	ctx := context.Background()
	var res limiter.Result
	b.ReportAllocs()
	for b.Loop() {
		l.CheckInto(ctx, req, &res)
	}
}
