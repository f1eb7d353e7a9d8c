package memstore_test

import (
	"context"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// Keyed buckets in the representation of bucket.CompileSmall (a clock
// tick for large limits) against an exact rational model: never more
// admitted than the model allows, and under-admission below 1e-6 of the
// capacity plus one tick's refill.
func TestCompileSmallAgainstExactModel(t *testing.T) {
	t.Parallel()
	for _, l := range []bucket.Limit{
		{Capacity: 999_999_937, Rate: 999_999_937.0 / 86400},
		{Capacity: 123_456_789, Rate: 123_456_789.0 / 3600},
		{Capacity: 16_777_213, Rate: 16_777_213.0 / 60},
		{Capacity: 999_999_937, Rate: 999_999_937},
		{Capacity: 1_000_003, Rate: 1_000_003.0 / 86400},
	} {
		sp, err := store.NewBucketSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		n, per, ok := l.RatePer()
		if !ok {
			t.Fatalf("%v: not N per period", l)
		}
		rate := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(n), big.NewInt(1e9)), big.NewInt(int64(per))) // tokens per s
		_, den, _ := sp.Bucket.Ratio()
		tick := new(big.Rat).Mul(rate, new(big.Rat).SetFrac64(int64(den), 1e9)) // tokens per tick
		clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
		s := memstore.New(memstore.WithClock(clock))
		capacity := new(big.Rat).SetInt64(l.Capacity)
		tokens := new(big.Rat).Set(capacity)
		tol := new(big.Rat).Add(new(big.Rat).SetFrac64(l.Capacity, 1_000_000), tick)
		rng := rand.New(rand.NewPCG(uint64(l.Capacity), 3))
		fill := float64(l.Capacity) / l.Rate
		for step := range 3000 {
			dt := time.Duration(fill * 1e9 * rng.Float64() * rng.Float64() / 50)
			clock.Advance(dt)
			tokens.Add(tokens, new(big.Rat).Mul(rate, new(big.Rat).SetFrac64(int64(dt), 1e9)))
			if tokens.Cmp(capacity) > 0 {
				tokens.Set(capacity)
			}
			cost := 1 + rng.Int64N(l.Capacity/20)
			items := []store.Item{{Key: "k", Spec: sp, Cost: cost}}
			if _, err := s.Take(context.Background(), items); err != nil {
				t.Fatal(err)
			}
			fits := tokens.Cmp(new(big.Rat).SetInt64(cost)) >= 0
			switch d := items[0].Decision; {
			case d.Allowed && !fits:
				t.Fatalf("%v step %d: admitted %d with %s in the model", l, step, cost, tokens.FloatString(3))
			case !d.Allowed && fits && new(big.Rat).Sub(tokens, new(big.Rat).SetInt64(cost)).Cmp(tol) > 0:
				t.Fatalf("%v step %d: refused %d with %s in the model (tolerance %s)", l, step, cost, tokens.FloatString(3), tol.FloatString(3))
			case d.Allowed:
				tokens.Sub(tokens, new(big.Rat).SetInt64(cost))
			}
		}
	}
}
