// BenchmarkCheckOverridesRedis: the cost of a check under 100,000 exact and
// 1,000 prefix overrides on Redis, against a check with none
// (BENCHMARKS.md, "Overrides (issue 25)").

package redisstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
)

// BenchmarkCheckOverridesRedis is limiter/bench_test.go's
// BenchmarkCheckOverrides on a real Redis: CheckInto on one token-bucket
// limit, one hot key, without a Set (none) and with 100,000 exact and
// 1,000 prefix overrides, for a request no override matches (miss), one an
// exact override decides (exact) and one a prefix override decides
// (prefix).
func BenchmarkCheckOverridesRedis(b *testing.B) {
	p, err := policy.Parse([]byte("limits:\n  - name: tenant\n    key: \"tenant:{tenant}\"\n    capacity: 1000000000\n    refill_per_second: 1000000000\n"))
	if err != nil {
		b.Fatal(err)
	}
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
	st := open(b)
	ctx := context.Background()
	for _, c := range []struct {
		name, tenant string
		set          *overrides.Set
	}{{"none", "0000001", nil}, {"miss", "0000001", set}, {"exact", "t050000", set}, {"prefix", "p500_x", set}} {
		b.Run(c.name, func(b *testing.B) {
			var opts []limiter.Option
			if c.set != nil {
				opts = append(opts, limiter.WithOverrides(c.set))
			}
			l, err := limiter.New(p, st, opts...)
			if err != nil {
				b.Fatal(err)
			}
			req := limiter.Request{Descriptors: map[string]string{"tenant": c.tenant}}
			var res limiter.Result
			b.ReportAllocs()
			for b.Loop() {
				if err := l.CheckInto(ctx, req, &res); err != nil {
					b.Fatal(err)
				}
			}
			if (c.name == "exact" || c.name == "prefix") != (res.Limits[0].Override != nil) {
				b.Fatalf("%s: override %v", c.name, res.Limits[0].Override)
			}
		})
	}
}
