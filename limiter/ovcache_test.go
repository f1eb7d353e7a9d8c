// Tests of the per-limit cache of resolved overrides: a cached answer is
// the Index's, with the status overridden makes, and follows every change
// of the Set and every expiry.

package limiter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

func cacheLimiter(t *testing.T, tmpl string) (*Limiter, *overrides.Set) {
	t.Helper()
	p, err := policy.Parse([]byte("limits:\n  - name: tenant\n    key: \"" + tmpl + "\"\n    capacity: 100\n    refill_per_second: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	set := overrides.NewSet(p)
	l, err := New(p, memstore.New(), WithOverrides(set))
	if err != nil {
		t.Fatal(err)
	}
	return l, set
}

func put(t *testing.T, set *overrides.Set, tenant string, capacity int64, expires time.Time) {
	t.Helper()
	o := overrides.Override{Name: "tenant", Match: map[string]string{"tenant": tenant}, Params: overrides.Params{Capacity: capacity}, ExpiresAt: expires}
	if err := set.Put(&o); err != nil {
		t.Fatal(err)
	}
}

// capacityOf checks tenant and returns its limit's capacity and override.
func capacityOf(t *testing.T, l *Limiter, tenant string) (int64, *overrides.Rule) {
	t.Helper()
	var res Result
	if err := l.CheckInto(context.Background(), Request{Descriptors: map[string]string{"tenant": tenant}}, &res); err != nil {
		t.Fatal(err)
	}
	return res.Limits[0].Capacity, res.Limits[0].Override
}

// A status from the cache is the one overridden makes.
func TestCachedStatus(t *testing.T) {
	l, set := cacheLimiter(t, "tenant:{tenant}")
	put(t, set, "acme", 500, time.Time{})
	put(t, set, "pre_*", 50, time.Time{})
	for _, tenant := range []string{"acme", "pre_x"} {
		c := l.compiled.Load()
		want := c.status[0]
		c.overridden(0, set.Resolve("tenant", map[string]string{"tenant": tenant}, time.Now()), &want)
		for n := range 3 { // (a miss, then the cache)
			var res Result
			if err := l.CheckInto(context.Background(), Request{Descriptors: map[string]string{"tenant": tenant}}, &res); err != nil {
				t.Fatal(err)
			}
			got := res.Limits[0]
			got.Key, got.TokensRemaining, got.TokenCost, got.Allowed, got.RetryAfter, got.ResetAfter = "", 0, 0, false, 0, 0
			if got != want {
				t.Fatalf("%s, check %d: status %+v, want %+v", tenant, n, got, want)
			}
		}
	}
}

// Put, Delete and expiry change the answer for a key the cache holds.
func TestCacheFollowsChanges(t *testing.T) {
	l, set := cacheLimiter(t, "tenant:{tenant}")
	check := func(want int64) {
		t.Helper()
		for range 3 {
			if got, _ := capacityOf(t, l, "acme"); got != want {
				t.Fatalf("capacity %d, want %d", got, want)
			}
		}
	}
	check(100)
	put(t, set, "acme", 500, time.Time{})
	check(500)
	put(t, set, "acme", 700, time.Time{})
	check(700)
	put(t, set, "ac*", 900, time.Time{}) // (less specific: the exact one stays)
	check(700)
	if err := set.Delete("tenant", map[string]string{"tenant": "acme"}); err != nil {
		t.Fatal(err)
	}
	check(900)
	put(t, set, "acme", 300, time.Now().Add(80*time.Millisecond))
	check(300)
	time.Sleep(100 * time.Millisecond)
	check(900) // (expired, not swept)
	set.Sweep(time.Now())
	check(900)
	p, _ := policy.Parse([]byte("limits:\n  - name: tenant\n    key: \"tenant:{tenant}\"\n    capacity: 100\n    refill_per_second: 10\n"))
	set.SetPolicy(p, nil)
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	l.SetOverrides(set)
	check(900)
	if err := set.Delete("tenant", map[string]string{"tenant": "ac*"}); err != nil {
		t.Fatal(err)
	}
	check(100)
}

// A template whose key may not tell descriptors apart has no cache (and
// resolves every time).
func TestCacheTemplates(t *testing.T) {
	for tmpl, keyed := range map[string]bool{"tenant:{tenant}": true, "{tenant}": true, "{tenant}:{user}": true,
		"{tenant}{user}": false, "{tenant}-{user}": false, "a{tenant}b%{user}": true} {
		p, err := policy.Parse([]byte("limits:\n  - name: x\n    key: \"" + tmpl + "\"\n    capacity: 1\n    refill_per_second: 1\n"))
		if err != nil {
			t.Fatal(tmpl, err)
		}
		if got := newOvCache(p.Limits[0]) != nil; got != keyed {
			t.Errorf("%q: cache %v, want %v", tmpl, got, keyed)
		}
	}
}

// Checks racing Puts and Deletes see, once a change is made, the change.
func TestCacheConcurrentChanges(t *testing.T) {
	l, set := cacheLimiter(t, "tenant:{tenant}")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res Result
			req := Request{Descriptors: map[string]string{"tenant": fmt.Sprintf("t%d", g%2)}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := l.CheckInto(context.Background(), req, &res); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for n := range 200 {
		c := int64(200 + n)
		put(t, set, "t0", c, time.Time{})
		if got, _ := capacityOf(t, l, "t0"); got != c {
			t.Fatalf("after Put %d: capacity %d", c, got)
		}
		if err := set.Delete("tenant", map[string]string{"tenant": "t0"}); err != nil {
			t.Fatal(err)
		}
		if got, _ := capacityOf(t, l, "t0"); got != 100 {
			t.Fatalf("after Delete: capacity %d", got)
		}
	}
	close(stop)
	wg.Wait()
}
