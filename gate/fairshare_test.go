package gate_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// flood runs, one call a millisecond for span, the calls each tick asks
// for (tenant names; a name may appear more than once), through g (a
// for the first name of a tick, b for the others: two workers), and
// returns each tenant's admitted count and the admissions' times.
func flood(t *testing.T, a, b *gate.Gate, span time.Duration, tick func(ms int) []string, opts ...gate.Option) (map[string]int, []time.Duration) {
	t.Helper()
	ctx := context.Background()
	got := map[string]int{}
	var at []time.Duration
	start := time.Now()
	for ms := 0; time.Since(start) < span; ms++ {
		for i, tenant := range tick(ms) {
			g := a
			if i > 0 {
				g = b
			}
			err := g.Do(ctx, 1, nop, append([]gate.Option{gate.Tenant(tenant)}, opts...)...)
			switch {
			case err == nil:
				got[tenant]++
				at = append(at, time.Since(start))
			case !errors.Is(err, sluice.ErrQueueFull):
				t.Fatalf("%s: %v", tenant, err)
			}
		}
		time.Sleep(time.Millisecond)
	}
	return got, at
}

// withinBucket fails when the admissions at (sorted, from a full bucket
// of capacity c and rate r per second) exceed c + r·t at any time.
func withinBucket(t *testing.T, at []time.Duration, c, r int64) {
	t.Helper()
	for i, d := range at {
		if (int64(i+1)-c)*int64(time.Second) > r*int64(d) {
			t.Fatalf("%d admitted by %v: more than B + r·t", i+1, d)
		}
	}
}

// The fair-share proof through a shared gate (two gates of one
// name on memstore, B=100, r=100/s, active_window 10 s): A floods at 10x
// the refill while B and C each send 20 % of it: B and C are admitted
// every time, A takes the rest, the total within B + r·t; once B and C
// stop, A alone gets at least 95 % of the refill within the active
// window.
func TestSharedFairShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 100, Rate: 100},
			FairShare: gate.FairShare{ActiveWindow: 10 * time.Second}})
		got, at := flood(t, a, b, 10*time.Second, func(ms int) []string {
			if ms%50 == 0 {
				return []string{"A", "B", "C"}
			}
			return []string{"A"}
		})
		withinBucket(t, at, 100, 100)
		if got["B"] != 200 || got["C"] != 200 {
			t.Fatalf("B and C (20/s each, 200 asked): admitted %d and %d", got["B"], got["C"])
		}
		if total := got["A"] + got["B"] + got["C"]; total < 1045 {
			t.Fatalf("%d admitted in 10 s (A %d), want the bucket's B + r·t = 1,100 but for the share's slack", total, got["A"])
		}
		t.Logf("A %d, B %d, C %d admitted in 10 s (B + r·t = 1,100)", got["A"], got["B"], got["C"])
		alone, _ := flood(t, a, b, 10*time.Second, func(int) []string { return []string{"A"} })
		if alone["A"] < 950 {
			t.Fatalf("A alone within the window after B and C stop: %d admitted in 10 s, want at least 95 %% of r·t = 1,000", alone["A"])
		}
		t.Logf("A alone: %d in the next 10 s", alone["A"])
	})
}

// Weights 3:1 (acme 3, beta 1), both flooding: shares of the admissions
// within ±5 % of 75 % and 25 %; within one priority class the share is
// the class's and the tenant's.
func TestSharedFairShareWeights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := sharedPair(t, gate.Config{Limit: bucket.Limit{Capacity: 100, Rate: 100},
			FairShare:  gate.FairShare{ActiveWindow: 10 * time.Second, Weights: map[string]uint32{"acme": 3}},
			Priorities: []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 200_000}}})
		for _, class := range []string{"", "batch"} {
			var opts []gate.Option
			if class != "" {
				opts = append(opts, gate.Priority(class))
			}
			time.Sleep(20 * time.Second) // (the bucket full, every tenant expired)
			got, _ := flood(t, a, b, 20*time.Second, func(int) []string { return []string{"acme", "beta"} }, opts...)
			total := got["acme"] + got["beta"]
			share := float64(got["acme"]) / float64(total)
			if share < 0.70 || share > 0.80 {
				t.Fatalf("class %q: acme %d, beta %d: acme's share %.3f, want 0.75 ± 0.05", class, got["acme"], got["beta"], share)
			}
			t.Logf("class %q: acme %d, beta %d (%.2f %%)", class, got["acme"], got["beta"], share*100)
		}
	})
}

// FairShare needs a Store and sound values; a gate without FairShare
// ignores Tenant.
func TestFairShareConfig(t *testing.T) {
	for _, fs := range []gate.FairShare{
		{ActiveWindow: -time.Second},
		{Weights: map[string]uint32{"acme": 3}},
		{ActiveWindow: time.Second, Weights: map[string]uint32{"acme": 0}},
		{ActiveWindow: time.Second, Weights: map[string]uint32{"": 2}},
		{ActiveWindow: time.Second, MaxTenants: -1},
	} {
		st := memstore.New()
		_, err := gate.New(gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}, Store: st, FairShare: fs})
		st.Close()
		if !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v", fs, err)
		}
	}
	if _, err := gate.New(gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}, FairShare: gate.FairShare{ActiveWindow: time.Second}}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("FairShare without a Store: %v", err)
	}
	g, err := gate.New(gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Do(context.Background(), 1, nop, gate.Tenant("acme")); err != nil {
		t.Errorf("Tenant on a gate without FairShare: %v", err)
	}
}

// holderRec records the share holder of the fair-share items a gate takes.
type holderRec struct {
	store.Store
	holders []string
}

func (r *holderRec) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	for _, it := range items {
		if it.Spec.FairShare != nil {
			r.holders = append(r.holders, it.Tenant)
		}
	}
	return r.Store.Take(ctx, items)
}

// A tenant's value is the caller's: one that spells a class's holder
// ("batch\x1facme", with no class, on a gate with classes) is a holder of
// its own, never batch's acme (whose virtual time and weight it would
// take over), as in the limiter (limiter TestFairShareHolderNotSpoofed).
func TestFairShareHolderNotSpoofed(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	rec := &holderRec{Store: st}
	g, err := gate.New(gate.Config{Name: "llm", Limit: bucket.Limit{Capacity: 100, Rate: 100}, Store: rec,
		FairShare:  gate.FairShare{ActiveWindow: 10 * time.Second},
		Priorities: []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: 500_000}}})
	if err != nil {
		t.Fatal(err)
	}
	holder := func(class, tenant string) string {
		t.Helper()
		opts := []gate.Option{gate.Tenant(tenant)}
		if class != "" {
			opts = append(opts, gate.Priority(class))
		}
		rec.holders = nil
		if err := g.Do(context.Background(), 1, nop, opts...); err != nil {
			t.Fatal(err)
		}
		if len(rec.holders) != 1 {
			t.Fatalf("class %q tenant %q: %d fair-share items taken, want 1", class, tenant, len(rec.holders))
		}
		return rec.holders[0]
	}
	seen := map[string]string{}
	for _, r := range [][2]string{{"batch", "acme"}, {"", "batch\x1facme"}, {"", "\x1fbatch\x1facme"}, {"batch", "\x1facme"}, {"", "acme"}, {"", "\x1f"}, {"batch", ""}} {
		h := holder(r[0], r[1])
		if prev, dup := seen[h]; dup {
			t.Errorf("class %q tenant %q: holder %q, as %s's", r[0], r[1], h, prev)
		}
		seen[h] = r[0] + "/" + r[1]
	}
	if h := holder("", "acme"); h != "acme" {
		t.Errorf("a plain tenant's holder %q, want acme", h)
	}
	if h := holder("batch", "acme"); h != "batch\x1facme" {
		t.Errorf("batch's acme's holder %q, want batch\\x1facme", h)
	}
}
