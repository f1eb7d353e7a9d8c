package bucket_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// model is the exact reference token bucket of docs/behaviour.md section 1,
// in rationals.
type model struct {
	capacity, rate, tokens *big.Rat
	last                   int64 // ns
}

// exactRate is the rate a limit stands for, in tokens per second: its
// RatePer fraction when it has one, else the float's own value.
func exactRate(l bucket.Limit) *big.Rat {
	if n, per, ok := l.RatePer(); ok {
		return new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(n), big.NewInt(1e9)), big.NewInt(int64(per)))
	}
	return new(big.Rat).SetFloat64(l.Rate)
}

func newModel(l bucket.Limit, empty bool) *model {
	m := &model{capacity: new(big.Rat).SetInt64(l.Capacity), rate: exactRate(l)}
	m.tokens = new(big.Rat).Set(m.capacity)
	if empty {
		m.tokens.SetInt64(0)
	}
	return m
}

func (m *model) advance(now int64) {
	if now <= m.last {
		return
	}
	el := new(big.Rat).SetFrac64(now-m.last, 1e9)
	m.tokens.Add(m.tokens, el.Mul(el, m.rate))
	if m.tokens.Cmp(m.capacity) > 0 {
		m.tokens.Set(m.capacity)
	}
	m.last = now
}

func (m *model) tokensAfter(d time.Duration) *big.Rat {
	t := new(big.Rat).SetFrac64(int64(d), 1e9)
	t.Mul(t, m.rate)
	t.Add(t, m.tokens)
	if t.Cmp(m.capacity) > 0 {
		t.Set(m.capacity)
	}
	return t
}

func ratInt(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom()) // truncates toward zero
	if r.Sign() < 0 && !r.IsInt() {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}

// randomLimit draws a limit across the whole supported range: rates from
// 0.001/s to 1e9/s, capacities from 1 to 1e9 (log-uniform).
func randomLimit(rng *rand.Rand) bucket.Limit {
	for {
		r := math.Pow(10, -3+12*rng.Float64())
		switch rng.IntN(4) {
		case 0: // round rates too: 1, 2, 50, 1e9 ...
			r = math.Round(r)
		case 1: // N per minute, hour or day, as PerMinute and Envoy write them
			per := []float64{60, 3600, 86400}[rng.IntN(3)]
			r = math.Max(1, math.Round(r*per)) / per
		}
		c := int64(math.Pow(10, 9*rng.Float64()))
		l := bucket.Limit{Capacity: max(c, 1), Rate: r}
		if l.Validate() == nil {
			return l
		}
	}
}

// TestPropertyAgainstExactModel drives random limits, time steps and costs
// and checks every decision against the exact model: sluice never admits
// what the model refuses (never over-admits), refuses only when the model's
// surplus is under 1e-6 of the capacity, reports Remaining within the same
// bound, and a caller that waits exactly RetryAfter is admitted.
func TestPropertyAgainstExactModel(t *testing.T) {
	t.Parallel()
	seeds := 300
	steps := 400
	if testing.Short() {
		seeds = 40
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		l := randomLimit(rng)
		empty := rng.IntN(3) == 0
		// The bucket starts at epoch0, as the model does at 0.
		opts := []bucket.Option{bucket.WithClock(sluice.NewManualClock(epoch0))}
		if empty {
			opts = append(opts, bucket.StartEmpty())
		}
		b, err := bucket.New(l, opts...)
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(l, empty)
		tol := new(big.Rat).SetFrac64(l.Capacity, 1_000_000)
		fill := float64(l.Capacity) / l.Rate * 1e9 // ns to refill
		now := int64(0)
		var pendingRetry time.Duration
		var pendingCost int64
		for step := range steps {
			var cost int64
			switch {
			case pendingRetry > 0:
				// Wait exactly RetryAfter and ask again: must be admitted.
				now += int64(pendingRetry)
				cost = pendingCost
			default:
				// Up to ten times the refill time, at most ~104 days a step.
				now += int64(min(fill*math.Pow(10, -6+7*rng.Float64())*rng.Float64(), 1<<53))
				switch rng.IntN(4) {
				case 0:
					cost = 1
				case 1:
					cost = rng.Int64N(l.Capacity + 1)
				default:
					cost = rng.Int64N(min(l.Capacity, 1000) + 1)
				}
			}
			if now > 1<<62 { // ~146 years: enough, and time.Duration ends at 292
				break
			}
			retrying := pendingRetry > 0
			pendingRetry = 0
			d, err := b.AllowAt(epoch0.Add(time.Duration(now)), cost)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			m.advance(now)
			if testing.Verbose() && seed < 0 {
				t.Logf("step %d now %d cost %d dec %+v model %s sluice %v", step, now, cost, d, m.tokens.FloatString(6), b.TokensAt(epoch0.Add(time.Duration(now))))
			}
			c := ratInt(cost)
			fail := func(what string) {
				t.Fatalf("seed %d step %d limit %v cost %d: %s; model tokens %s; decision %+v",
					seed, step, l, cost, what, m.tokens.FloatString(9), d)
			}
			if d.Allowed {
				if m.tokens.Cmp(c) < 0 {
					fail("over-admitted")
				}
				m.tokens.Sub(m.tokens, c)
			} else {
				if retrying {
					fail("refused after waiting exactly RetryAfter")
				}
				if new(big.Rat).Add(c, tol).Cmp(m.tokens) <= 0 {
					fail("under-admitted by more than 1e-6 of capacity")
				}
				if d.RetryAfter <= 0 {
					fail("refused without RetryAfter")
				}
				// The model must be able to admit after RetryAfter (sluice
				// never holds more than the model), and not 1 ns earlier by
				// more than the tolerance.
				if m.tokensAfter(d.RetryAfter).Cmp(c) < 0 {
					fail("RetryAfter shorter than the exact wait")
				}
				// ... and it is not longer than the model's exact wait plus
				// the time to refill the tolerance.
				if slack := time.Duration(float64(l.Capacity)/1e6/l.Rate*1e9) + 2; d.RetryAfter > slack && m.tokensAfter(d.RetryAfter-slack).Cmp(c) > 0 {
					fail("RetryAfter longer than the exact wait by more than the tolerance")
				}
				if rng.IntN(2) == 0 {
					pendingRetry, pendingCost = d.RetryAfter, cost
				}
			}
			if rem := floorRat(m.tokens); d.Remaining > rem || d.Remaining < floorRat(new(big.Rat).Sub(m.tokens, tol)) {
				fail("Remaining off by more than the tolerance")
			}
		}
	}
}

// TestAdmittedNeverExceedsBound runs millions of decisions at several rates,
// including 1e9/s with costs in bytes, and checks the bound of
// docs/behaviour.md section 1.4: from a full
// bucket, admitted cost over [0, t] is at most B + r*t, and (the load being
// heavier than the rate) at least B + r*t - 1e-6*B - one token.
func TestAdmittedNeverExceedsBound(t *testing.T) {
	t.Parallel()
	n := 2_000_000
	if testing.Short() {
		n = 200_000
	}
	for _, tc := range []struct {
		l    bucket.Limit
		step time.Duration
		cost int64
	}{
		{bucket.Limit{Capacity: 1 << 20, Rate: 1e9}, 700 * time.Nanosecond, 1500},  // bytes at 1 GB/s
		{bucket.Limit{Capacity: 64 << 10, Rate: 3e8}, 300 * time.Nanosecond, 1000}, // 3.33 ns per byte
		// A fast rate that is no simple fraction (binary units, a fractional
		// virtual clock) over 2000 s: the state is rebased many times
		// (MaxElapsed is about 120 s) while never full.
		{bucket.Limit{Capacity: 1 << 20, Rate: math.Nextafter(1e9/7, 0)}, time.Millisecond, 1 << 19},
		// 1e9/3 per s is exactly a third of a token a nanosecond (whole
		// units: 3 a token).
		{bucket.Limit{Capacity: 1 << 20, Rate: 1e9 / 3}, time.Millisecond, 1 << 19},
		// Whole units and a rebase every ~1.15 s.
		{bucket.Limit{Capacity: 1 << 20, Rate: 999_999_937}, 3 * time.Microsecond, 1 << 12},
		{bucket.Limit{Capacity: 7, Rate: 1.0 / 3}, 333 * time.Millisecond, 1},
		{bucket.Limit{Capacity: 3, Rate: 0.001}, 900 * time.Millisecond, 1},
		{bucket.PerMinute(100), 500 * time.Millisecond, 1},
	} {
		b, err := bucket.New(tc.l)
		if err != nil {
			t.Fatal(err)
		}
		var admitted int64
		var now time.Duration
		for i := range n {
			now = time.Duration(i) * tc.step
			if tc.step >= time.Millisecond && tc.l.Rate > 1e6 && i > n/2 {
				break // enough for the rebase case
			}
			d, err := b.AllowAt(epoch0.Add(now), tc.cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted += tc.cost
			}
		}
		bound := exactRate(tc.l)
		bound.Mul(bound, new(big.Rat).SetFrac64(int64(now), 1e9))
		bound.Add(bound, ratInt(tc.l.Capacity))
		if ratInt(admitted).Cmp(bound) > 0 {
			t.Fatalf("%v: admitted %d > B + r*t = %s", tc.l, admitted, bound.FloatString(3))
		}
		// What is left unspent at the end: under one cost plus one step's
		// refill (the last arrival may find just under cost), and 1e-6 of B.
		slack := tc.cost + int64(tc.l.Rate*tc.step.Seconds()) + 1 + tc.l.Capacity/1_000_000
		low := new(big.Rat).Sub(bound, ratInt(slack))
		if ratInt(admitted).Cmp(low) < 0 {
			t.Fatalf("%v: admitted %d < B + r*t - slack = %s", tc.l, admitted, low.FloatString(3))
		}
		t.Logf("%v over %v: admitted %d of bound %s", tc.l, now, admitted, bound.FloatString(3))
	}
}

// TestRebaseIsExact drives fast rates for many MaxElapsed periods and
// compares every decision with the exact model; rebasing must not change
// one. The cases are a rate in binary units whose virtual clock has a
// fractional phase, and one in whole units whose MaxElapsed is about 1 s.
func TestRebaseIsExact(t *testing.T) {
	t.Parallel()
	for _, l := range []bucket.Limit{
		{Capacity: 1000, Rate: math.Nextafter(1e9/7, 0)},
		{Capacity: 1000, Rate: 999_999_937},
	} {
		testRebaseIsExact(t, l)
	}
}

func testRebaseIsExact(t *testing.T, l bucket.Limit) {
	p, err := bucket.Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, exact := p.Ratio(); !exact {
		t.Fatalf("rate not exact")
	}
	if p.MaxElapsed() > 200e9 {
		t.Fatalf("%v: MaxElapsed %v: the test would not rebase", l, time.Duration(p.MaxElapsed()))
	}
	b, err := bucket.New(l, bucket.WithClock(sluice.NewManualClock(epoch0)))
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(l, false)
	rng := rand.New(rand.NewPCG(1, 2))
	var now int64
	periods := int64(8)
	for now < periods*p.MaxElapsed() {
		// Mostly small steps (partial bucket), sometimes a jump across
		// most of a period.
		if rng.IntN(2000) == 0 {
			now += rng.Int64N(p.MaxElapsed())
		} else {
			now += rng.Int64N(10_000)
		}
		cost := rng.Int64N(1500) + 1
		cost = min(cost, l.Capacity)
		d, err := b.AllowAt(epoch0.Add(time.Duration(now)), cost)
		if err != nil {
			t.Fatal(err)
		}
		m.advance(now)
		if d.Allowed != (m.tokens.Cmp(ratInt(cost)) >= 0) {
			// Under-admission within one unit is allowed; over never.
			if d.Allowed {
				t.Fatalf("over-admitted at %d: model %s cost %d", now, m.tokens.FloatString(9), cost)
			}
			if new(big.Rat).Sub(m.tokens, ratInt(cost)).Cmp(new(big.Rat).SetFrac64(1, 1<<20)) > 0 {
				t.Fatalf("under-admitted at %d: model %s cost %d", now, m.tokens.FloatString(9), cost)
			}
		}
		if d.Allowed {
			m.tokens.Sub(m.tokens, ratInt(cost))
		}
	}
}
