package limiter_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
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

// BenchmarkCheckOverrides is a check on one limit with no Set (none), with
// a Set holding no override (empty), and with 100,000 exact and 1,000
// prefix overrides: a request no override
// matches (miss), one an exact override decides (exact), one a prefix
// override decides (prefix). BENCHMARKS.md, "Overrides (issue 25)".
func BenchmarkCheckOverrides(b *testing.B) {
	p, _ := policy.Parse([]byte("limits:\n  - name: tenant\n    key: \"tenant:{tenant}\"\n    capacity: 1000000000\n    refill_per_second: 1000000000\n"))
	set := overrides.NewSet(p)
	for i := range 100_000 {
		o := overrides.Override{Name: "tenant", Match: map[string]string{"tenant": fmt.Sprintf("t%06d", i)}, Params: overrides.Params{Capacity: 2_000_000_000}}
		if err := set.Put(&o); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 1_000 {
		o := overrides.Override{Name: "tenant", Match: map[string]string{"tenant": fmt.Sprintf("p%03d_*", i)}, Params: overrides.Params{Capacity: 2_000_000_000}}
		if err := set.Put(&o); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, c := range []struct {
		name, tenant string
		set          *overrides.Set
	}{{"none", "0000001", nil}, {"empty", "0000001", overrides.NewSet(p)}, {"miss", "0000001", set}, {"exact", "t050000", set}, {"prefix", "p500_x", set}} {
		b.Run(c.name, func(b *testing.B) {
			var opts []limiter.Option
			if c.set != nil {
				opts = append(opts, limiter.WithOverrides(c.set))
			}
			l, _ := limiter.New(p, memstore.New(), opts...)
			req := limiter.Request{Descriptors: map[string]string{"tenant": c.tenant}}
			var res limiter.Result
			b.ReportAllocs()
			for b.Loop() {
				l.CheckInto(ctx, req, &res)
			}
			if (c.name == "exact" || c.name == "prefix") != (res.Limits[0].Override != nil) {
				b.Fatalf("%s: override %v", c.name, res.Limits[0].Override)
			}
		})
	}
}
