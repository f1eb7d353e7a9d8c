package limiter_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

const shareSrc = `
limits:
  - name: provider_tpm
    key: "provider:{provider}"
    capacity: 10
    refill_per_second: 10
    fair_share:
      by: tenant
      weights: {acme: 3}
      active_window: 10s
  - name: per_user
    key: "user:{user}"
    capacity: 100
    refill_per_second: 1
`

// recorder is a real memstore (only its store.Store methods) that keeps
// the items of each Take, to see what the limiter asks of the store.
type recorder struct {
	store.Store
	mu    sync.Mutex
	items []store.Item
}

func (r *recorder) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	r.mu.Lock()
	r.items = append(r.items[:0], items...)
	r.mu.Unlock()
	return r.Store.Take(ctx, items)
}

// The item names its holder (the by descriptor's value, per class) and
// weight; the status shows them, and marks a share's refusal.
func TestFairShareItems(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	rec := &recorder{Store: memstore.New(memstore.WithClock(c))}
	l := limiterOver(t, shareSrc, rec)
	ctx := context.Background()
	do := func(desc map[string]string, cost int64) (limiter.Result, store.Item) {
		t.Helper()
		res, err := l.Check(ctx, limiter.Request{Descriptors: desc, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, it := range rec.items {
			if strings.HasPrefix(it.Key, "provider_tpm") {
				return res, it
			}
		}
		t.Fatalf("no provider_tpm item in %+v", rec.items)
		return res, store.Item{}
	}
	res, it := do(map[string]string{"provider": "p", "tenant": "acme"}, 1)
	if it.Tenant != "acme" || it.Weight != 3 || res.Limits[0].FairShare != (limiter.ShareStatus{Tenant: "acme", Weight: 3}) {
		t.Fatalf("acme: item %q %d, status %+v", it.Tenant, it.Weight, res.Limits[0].FairShare)
	}
	_, it = do(map[string]string{"provider": "p", "tenant": "zed", "user": "u"}, 1)
	if it.Tenant != "zed" || it.Weight != 1 {
		t.Fatalf("zed: %q %d", it.Tenant, it.Weight)
	}
	res, it = do(map[string]string{"provider": "p"}, 1)
	if it.Tenant != store.OtherHolder || it.Weight != 1 || res.Limits[0].FairShare != (limiter.ShareStatus{Weight: 1}) {
		t.Fatalf("no tenant: %q %d %+v", it.Tenant, it.Weight, res.Limits[0].FairShare)
	}
	// Contended now (7 taken of 10 after 4 more): acme 3 of Σw 5 (acme,
	// zed, other): 1 token is 1/6 s of its virtual time; zed's 1/2 s.
	do(map[string]string{"provider": "p", "tenant": "acme"}, 4)
	res, _ = do(map[string]string{"provider": "p", "tenant": "zed"}, 1) // zed: 0.5 s ahead: within τ/2
	if !res.Allowed {
		t.Fatalf("zed's first contended take: %+v", res)
	}
	res, _ = do(map[string]string{"provider": "p", "tenant": "zed"}, 1) // 1 s ahead: refused by the share
	if res.Allowed || !res.Limits[0].ShareRefused() || res.Limits[0].TokensRemaining < 1 {
		t.Fatalf("zed's second contended take: %+v", res)
	}
	js, _ := json.Marshal(res.Limits[0])
	if !strings.Contains(string(js), `"fair_share":{"tenant":"zed","weight":1,"refused":true}`) {
		t.Errorf("status JSON %s", js)
	}
	if js, _ := json.Marshal(res.Limits); strings.Count(string(js), "fair_share") != 1 {
		t.Errorf("a limit without fair_share shows one: %s", js)
	}
	// Another tenant is not refused by zed's share.
	if res, _ := do(map[string]string{"provider": "p", "tenant": "acme"}, 1); !res.Allowed || res.Limits[0].ShareRefused() {
		t.Fatalf("acme after zed's refusal: %+v", res)
	}
}

// With priority classes the holder is per class.
func TestFairShareClassHolder(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	rec := &recorder{Store: memstore.New(memstore.WithClock(c))}
	src := "priorities:\n  - name: interactive\n  - name: batch\n    reserve: 0.5\ndefault_priority: batch\n" + shareSrc
	l := limiterOver(t, src, rec)
	for class, want := range map[string]string{"": "batch\x1facme", "interactive": "interactive\x1facme"} {
		if _, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"provider": "p", "tenant": "acme"}, Cost: 1, Priority: class}); err != nil {
			t.Fatal(err)
		}
		if got := rec.items[0].Tenant; got != want || rec.items[0].Weight != 3 || rec.items[0].Reserve == 0 != (class == "interactive") {
			t.Errorf("class %q: holder %q weight %d reserve %d, want %q", class, got, rec.items[0].Weight, rec.items[0].Reserve, want)
		}
	}
}

// With waiting, a tenant's booking depth is bounded by its share: zed
// (weight 1 of 4, a token 0.4 s of its virtual time) books while its
// virtual time is within τ/2 + max_wait = 2.5 s of now, each booking
// waiting until it is within τ/2; without the share the bucket would book
// 24 (4 held and 2 s of refill).
func TestFairShareBookingDepth(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	l := limiterOver(t, shareSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	ask := func(tenant string, cost int64, wait time.Duration) limiter.Result {
		t.Helper()
		res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"provider": "p", "tenant": tenant}, Cost: cost, MaxWait: wait, Reserve: wait > 0})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	ask("zed", 1, 0)
	ask("acme", 5, 0) // 4 left: contended
	var waits []time.Duration
	for range 10 {
		res := ask("zed", 1, 2*time.Second)
		if !res.Allowed {
			break
		}
		waits = append(waits, res.Wait)
	}
	want := []time.Duration{0, 300 * time.Millisecond, 700 * time.Millisecond, 1100 * time.Millisecond, 1500 * time.Millisecond, 1900 * time.Millisecond}
	if !slices.Equal(waits, want) {
		t.Fatalf("zed's bookings waited %v, want %v", waits, want)
	}
}

// A tenant's value is the client's: one that spells a class's holder
// ("batch\x1facme", sent with no class under a policy with classes and no
// default) is a holder of its own, never batch's acme (whose virtual time
// and weight it would otherwise take over).
func TestFairShareHolderNotSpoofed(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	rec := &recorder{Store: memstore.New(memstore.WithClock(c))}
	src := "priorities:\n  - name: interactive\n  - name: batch\n    reserve: 0.5\n" + shareSrc
	l := limiterOver(t, src, rec)
	holder := func(class, tenant string) string {
		t.Helper()
		if _, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"provider": "p", "tenant": tenant}, Cost: 1, Priority: class}); err != nil {
			t.Fatal(err)
		}
		return rec.items[0].Tenant
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
}
