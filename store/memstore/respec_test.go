package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

func bucketSpec(t *testing.T, capacity int64, rate float64) *store.Spec {
	t.Helper()
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: capacity, Rate: rate}})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// A key decided under another spec than the one that wrote its state
// (Item.Base) is converted by the SetLimit rule: no credit created, tokens
// above a smaller capacity dropped, debt kept; and it refills at the rate
// of the spec in force.
func TestSpecChangeKeepsTokens(t *testing.T) {
	clk := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	s := memstore.New(memstore.WithClock(clk))
	ctx := context.Background()
	p, q := bucketSpec(t, 10, 1), bucketSpec(t, 100, 10)
	take := func(sp, base *store.Spec, n int) int {
		got := 0
		for range n {
			it := []store.Item{{Key: "k", Spec: sp, Base: base, Cost: 1}}
			r, err := s.Take(ctx, it)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				got++
			}
		}
		return got
	}
	if n := take(p, nil, 20); n != 10 {
		t.Fatalf("%d of 20 admitted by a bucket of 10", n)
	}
	if n := take(q, p, 5); n != 0 {
		t.Fatalf("raised to 100: %d admitted at once from an exhausted bucket (a burst)", n)
	}
	clk.Advance(time.Second)
	if n := take(q, p, 30); n != 10 {
		t.Fatalf("a second at 10/s: %d admitted, want 10", n)
	}
	clk.Advance(20 * time.Second)
	if n := take(q, p, 50); n != 50 { // 100 held
		t.Fatalf("%d admitted of 100 held", n)
	}
	// Back to the usual spec (the override gone): 50 held, 10 kept.
	if n := take(p, nil, 20); n != 10 {
		t.Fatalf("lowered to 10 with 50 held: %d admitted, want 10", n)
	}
	clk.Advance(time.Second)
	if n := take(p, nil, 5); n != 1 {
		t.Fatalf("a second at 1/s: %d admitted, want 1", n)
	}
	// Debt is kept: a charge of 30 puts the bucket into debt under p (of
	// one capacity at most: 10), then a raise: still refused until the
	// debt is paid at the new rate (1 s at 10/s).
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "k", Spec: p, Delta: 30}}); err != nil {
		t.Fatal(err)
	}
	if n := take(q, p, 1); n != 0 {
		t.Fatal("a bucket in debt admitted after a raise")
	}
	clk.Advance(time.Second)
	if n := take(q, p, 1); n != 0 {
		t.Fatal("admitted before the debt was paid at the new rate")
	}
	clk.Advance(100 * time.Millisecond)
	if n := take(q, p, 2); n != 1 {
		t.Fatalf("debt paid at the new rate: %d admitted, want 1", n)
	}
}

// A peek or refusal converts too: the change takes effect at the key's
// first decision after it, so a key refused right after a raise refills
// at the new rate from then.
func TestSpecChangeOnRefusal(t *testing.T) {
	clk := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	s := memstore.New(memstore.WithClock(clk))
	ctx := context.Background()
	p, q := bucketSpec(t, 2, 1), bucketSpec(t, 50, 5)
	for range 2 {
		s.Take(ctx, []store.Item{{Key: "k", Spec: p, Cost: 1}})
	}
	peek := []store.Item{{Key: "k", Spec: q, Base: p}}
	if _, err := s.Take(ctx, peek); err != nil || peek[0].Decision.Remaining != 0 {
		t.Fatalf("peek after a raise: %+v %v", peek[0].Decision, err)
	}
	clk.Advance(2 * time.Second)
	peek = []store.Item{{Key: "k", Spec: q, Base: p}}
	if _, err := s.Take(ctx, peek); err != nil || peek[0].Decision.Remaining != 10 {
		t.Fatalf("2 s at 5/s after the raise: %+v %v, want 10 left", peek[0].Decision, err)
	}
}
