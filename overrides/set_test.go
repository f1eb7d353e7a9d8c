package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

func TestSetPutGetDelete(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	s := overrides.NewSet(p)
	now := time.Now()
	o := overrides.Override{Name: "tenant_api", Match: m("tenant", "acme"), Params: overrides.Params{Capacity: 500, RefillPerSecond: 50}, Note: "trial"}
	o.Stamp(now, time.Time{})
	put(t, s, o)
	desc := m("tenant", "acme", "user", "u1")
	r := s.Resolve("tenant_api", desc, now)
	if r == nil || r.Spec() == nil || r.Spec().Capacity() != 500 || r.Limit().Bucket.Rate != 50 || r.Deny() || r.Unlimited() {
		t.Fatalf("Resolve = %+v", r)
	}
	if got := r.Override(); got.Note != "trial" || got.Source != overrides.SourceAPI || !got.CreatedAt.Equal(o.CreatedAt) {
		t.Fatalf("the rule's override %+v", got)
	}
	if s.Resolve("tenant_api", m("tenant", "other", "user", "u1"), now) != nil || s.Resolve("daily", desc, now) != nil || s.Resolve("nope", desc, now) != nil {
		t.Fatal("an override applied where it does not match")
	}
	r.Hit(now)
	r.Hit(now)
	o.Capacity = 600
	put(t, s, o) // a replacement keeps the counters
	r2 := s.Resolve("tenant_api", desc, now)
	if n, last := r2.Matched(); r2.Spec().Capacity() != 600 || n != 2 || !last.Equal(now) {
		t.Fatalf("after a replacement: capacity %d, matched %d at %v", r2.Spec().Capacity(), n, last)
	}
	if s.Count("tenant_api") != 1 || s.Counts()["tenant_api"] != 1 || s.Counts()["daily"] != 0 {
		t.Fatalf("counts %v", s.Counts())
	}
	if g := s.Get("tenant_api", m("tenant", "acme")); g != r2 {
		t.Fatal("Get does not return the rule in force")
	}
	if err := s.Delete("tenant_api", m("tenant", "acme")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("tenant_api", m("tenant", "acme")); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	if s.Resolve("tenant_api", desc, now) != nil || s.Count("tenant_api") != 0 {
		t.Fatal("a deleted override applies")
	}
	if err := s.Put(&overrides.Override{Name: "nope", Match: m("tenant", "a")}); !errors.Is(err, overrides.ErrUnknownLimit) {
		t.Fatalf("Put of an unknown limit: %v", err)
	}
}

func TestSharedSpecs(t *testing.T) {
	s := overrides.NewSet(mustPolicy(t, testPolicy))
	for _, tenant := range []string{"a", "b"} {
		put(t, s, overrides.Override{Name: "tenant_api", Match: m("tenant", tenant), Params: overrides.Params{Capacity: 7}})
	}
	put(t, s, overrides.Override{Name: "tenant_api", Match: m("tenant", "d"), Params: overrides.Params{Deny: true}})
	now := time.Now()
	a, b := s.Resolve("tenant_api", m("tenant", "a", "user", "u"), now), s.Resolve("tenant_api", m("tenant", "b", "user", "u"), now)
	if a.Spec() != b.Spec() {
		t.Fatal("equal parameters compiled to two specs")
	}
	if d := s.Resolve("tenant_api", m("tenant", "d", "user", "u"), now); !d.Deny() || d.Spec() != nil {
		t.Fatalf("deny rule %+v", d)
	}
}

const policyWithOverrides = testPolicy + `overrides:
  - name: tenant_api
    match: {tenant: "vip_*"}
    capacity: 1_000
    refill: 100/s
    note: tier
  - name: daily
    match: {user: blocked}
    deny: true
`

func TestPolicyOverrides(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	p.Source = []byte(policyWithOverrides) // (policy.Parse takes the overrides key once it is wired)
	loaded := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	pol, err := overrides.FromPolicy(p, loaded)
	if err != nil {
		t.Fatal(err)
	}
	if len(pol) != 2 || pol[0].Capacity != 1000 || pol[0].Refill != "100/s" || pol[0].Source != overrides.SourcePolicy || !pol[1].Deny || !pol[0].CreatedAt.Equal(loaded) {
		t.Fatalf("FromPolicy = %+v", pol)
	}
	s := overrides.NewSet(p)
	if errs := s.SetPolicy(p, pol); len(errs) != 0 {
		t.Fatal(errs)
	}
	vip := m("tenant", "vip_*")
	api := overrides.Override{Name: "tenant_api", Match: vip, Params: overrides.Params{Capacity: 5}}
	if err := s.Put(&api); !errors.Is(err, overrides.ErrPolicyOverride) {
		t.Fatalf("the API replaced a policy override: %v", err)
	}
	if err := s.Delete("tenant_api", vip); !errors.Is(err, overrides.ErrPolicyOverride) {
		t.Fatalf("the API deleted a policy override: %v", err)
	}
	r := s.Resolve("tenant_api", m("tenant", "vip_1", "user", "u"), time.Now())
	if r == nil || r.Spec().Capacity() != 1000 || r.Override().Source != overrides.SourcePolicy {
		t.Fatalf("policy override in force: %+v", r)
	}
	// An API override of a limit a new policy drops is held, and comes
	// back with a policy that has the limit again.
	put(t, s, overrides.Override{Name: "monthly", Match: m("tenant", "acme"), Params: overrides.Params{Limit: 9}})
	r.Hit(time.Now())
	if errs := s.SetPolicy(p, pol); len(errs) != 0 {
		t.Fatal(errs)
	}
	if n, _ := s.Resolve("tenant_api", m("tenant", "vip_1", "user", "u"), time.Now()).Matched(); n != 1 {
		t.Fatalf("a policy reload lost the counters: %d", n)
	}
	smaller := mustPolicy(t, strings.Replace(testPolicy, "name: monthly", "name: yearly", 1))
	if errs := s.SetPolicy(smaller, nil); len(errs) != 1 || !errors.Is(errs[0], overrides.ErrUnknownLimit) {
		t.Fatalf("SetPolicy without the limit: %v", errs)
	}
	if s.Count("monthly") != 0 || s.Resolve("monthly", m("tenant", "acme"), time.Now()) != nil || len(s.Inactive()) != 1 {
		t.Fatalf("an override of a dropped limit applies (%d held, %d inactive)", s.Count("monthly"), len(s.Inactive()))
	}
	if s.Count("tenant_api") != 0 {
		t.Fatal("the previous policy's overrides survived a policy without them")
	}
	if errs := s.SetPolicy(p, pol); len(errs) != 0 {
		t.Fatal(errs)
	}
	if r := s.Resolve("monthly", m("tenant", "acme"), time.Now()); r == nil || r.Spec().Capacity() != 9 || len(s.Inactive()) != 0 {
		t.Fatalf("the held override did not come back: %v", r)
	}
}

func TestFromPolicyErrors(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	p.Source = []byte(testPolicy + `overrides:
  - name: tenant_api
    match: {tenant: "a*b"}
  - name: daily
    match: {user: x}
    capacity: 5
  - name: nope
    match: {}
  - name: tenant_api
    match: {tenant: a}
    ttl_s: 5
  - name: tenant_api
    capacity: 5
  - name: tenant_api
    match: {tenant: a}
  - name: tenant_api
    match: {tenant: a}
`)
	_, err := overrides.FromPolicy(p, time.Now())
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"line 31, column 12", "may only end", `line 34, column 15: limit "daily": field "capacity": capacity is a field of token_bucket`,
		`limit "nope"`, "ttl_s", "missing match", "given twice (first at line 42)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the errors do not say %q:\n%v", want, err)
		}
	}
}

func TestApplyAndSync(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	ctx := context.Background()
	st, _ := overrides.NewMemStore(overrides.MemOptions{})
	a, b := overrides.NewSet(p), overrides.NewSet(p) // two instances
	o := overrides.Override{Name: "tenant_api", Match: m("tenant", "acme"), Params: overrides.Params{Capacity: 5}}
	o.Stamp(time.Now(), time.Time{})
	if _, err := st.Put(ctx, o); err != nil {
		t.Fatal(err)
	}
	bad := overrides.Override{Name: "gone", Match: m("tenant", "x"), Params: overrides.Params{Capacity: 5}}
	bad.Stamp(time.Now(), time.Time{})
	st.Put(ctx, bad)
	for _, s := range []*overrides.Set{a, b} {
		if errs, err := overrides.Sync(ctx, s, st); err != nil || len(errs) != 1 {
			t.Fatalf("Sync: %v %v", errs, err)
		}
	}
	desc := m("tenant", "acme", "user", "u")
	if b.Resolve("tenant_api", desc, time.Now()) == nil {
		t.Fatal("b does not see the override")
	}
	st.Delete(ctx, "tenant_api", o.Match)
	if _, err := overrides.Sync(ctx, b, st); err != nil {
		t.Fatal(err)
	}
	if b.Resolve("tenant_api", desc, time.Now()) != nil || a.Resolve("tenant_api", desc, time.Now()) == nil {
		t.Fatal("the delete did not reach b alone")
	}
	overrides.Sync(ctx, a, st)
	if a.Resolve("tenant_api", desc, time.Now()) != nil {
		t.Fatal("the delete did not reach a")
	}
	// A full answer replaces the API overrides.
	a.Put(&overrides.Override{Name: "tenant_api", Match: m("tenant", "local")})
	a.Apply(overrides.Changes{Version: 1, Full: true})
	if a.Count("tenant_api") != 0 || a.Version() != 1 {
		t.Fatalf("after a Full with nothing: %d held, version %d", a.Count("tenant_api"), a.Version())
	}
}

func TestList(t *testing.T) {
	s := overrides.NewSet(mustPolicy(t, testPolicy))
	now := time.Now()
	for i := range 25 {
		put(t, s, overrides.Override{Name: "tenant_api", Match: m("tenant", fmt.Sprintf("t%02d", i))})
		put(t, s, overrides.Override{Name: "tenant_api", Match: m("tenant", fmt.Sprintf("t%02d", i), "user", "*")})
	}
	put(t, s, overrides.Override{Name: "tenant_api", Match: m("tenant", "p*")})
	exp := overrides.Override{Name: "tenant_api", Match: m("tenant", "expired"), ExpiresAt: now.Add(-time.Second)}
	put(t, s, exp)
	s.Resolve("tenant_api", m("tenant", "t03", "user", "x"), now).Hit(now)
	var all []overrides.Listed
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := s.List("tenant_api", overrides.ListOptions{Cursor: cursor, N: 7, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 7 || pages > 10 {
			t.Fatalf("page of %d", len(page))
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(all) != 51 {
		t.Fatalf("listed %d, want 51 live overrides", len(all))
	}
	for i := 1; i < len(all); i++ {
		if overrides.CanonicalMatch(all[i-1].Match) >= overrides.CanonicalMatch(all[i].Match) {
			t.Fatalf("not in canonical order at %d", i)
		}
	}
	hits := 0
	for _, l := range all {
		if l.MatchedTotal > 0 {
			hits++
			if overrides.CanonicalMatch(l.Match) != `{"tenant":"t03","user":"*"}` || l.LastMatchedAt.IsZero() {
				t.Fatalf("the counted override is %v", l.Match)
			}
		}
	}
	if hits != 1 {
		t.Fatalf("%d overrides counted", hits)
	}
	page, next, _ := s.List("tenant_api", overrides.ListOptions{Match: m("user", "*"), Now: now})
	if len(page) != 25 || next != "" {
		t.Fatalf("filtered: %d, next %q", len(page), next)
	}
	if _, _, err := s.List("tenant_api", overrides.ListOptions{N: 1001}); !errors.Is(err, overrides.ErrBadRequest) {
		t.Fatalf("n 1001: %v", err)
	}
	if _, _, err := s.List("tenant_api", overrides.ListOptions{Cursor: "!!"}); !errors.Is(err, overrides.ErrBadRequest) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// TestConcurrentResolve runs Resolve on many goroutines while overrides
// change (for the race detector), checking that each answer is one of
// the overrides that could apply.
func TestConcurrentResolve(t *testing.T) {
	s := overrides.NewSet(mustPolicy(t, testPolicy))
	put(t, s, overrides.Override{Name: "tenant_api", Match: m("tenant", "a*"), Params: overrides.Params{Capacity: 1}})
	ix := s.Index("tenant_api")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			desc := m("tenant", "abc", "user", "u")
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := ix.Resolve(desc, time.Now())
				if r == nil {
					t.Error("no override applied")
					return
				}
				if c := r.Spec().Capacity(); c != 1 && c != 2 {
					t.Errorf("capacity %d", c)
					return
				}
				r.Hit(time.Now())
			}
		}()
	}
	for i := range 300 {
		o := overrides.Override{Name: "tenant_api", Match: m("tenant", "abc"), Params: overrides.Params{Capacity: 2}}
		if i%2 == 0 {
			put(t, s, o)
		} else if err := s.Delete("tenant_api", o.Match); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			s.SetPolicy(s.Policy(), nil)
			put(t, s, overrides.Override{Name: "tenant_api", Match: m("tenant", "a*"), Params: overrides.Params{Capacity: 1}})
		}
	}
	close(stop)
	wg.Wait()
}

func TestPutSharedDeleteShared(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	p.Source = []byte(policyWithOverrides)
	pol, err := overrides.FromPolicy(p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, _ := overrides.NewMemStore(overrides.MemOptions{Max: 1})
	s := overrides.NewSet(p)
	s.SetPolicy(p, pol)
	now := time.Now().UTC().Truncate(time.Millisecond)
	o := overrides.Override{Name: "tenant_api", Match: m("tenant", "acme"), Params: overrides.Params{Capacity: 500}, TTL: 60}
	stored, err := overrides.PutShared(ctx, s, st, o, now)
	if err != nil || !stored.ExpiresAt.Equal(now.Add(time.Minute)) || stored.Source != overrides.SourceAPI {
		t.Fatalf("PutShared = %+v, %v", stored, err)
	}
	if s.Resolve("tenant_api", m("tenant", "acme", "user", "u"), now) == nil {
		t.Fatal("the instance that put it does not apply it")
	}
	for _, c := range []struct {
		o    overrides.Override
		want error
	}{
		{overrides.Override{Name: "tenant_api", Match: m("tenant", "vip_*")}, overrides.ErrPolicyOverride},
		{overrides.Override{Name: "tenant_api", Match: m("tenant", "other")}, overrides.ErrTooMany},
		{overrides.Override{Name: "daily", Match: m("user", "x"), Params: overrides.Params{Capacity: 1}}, overrides.ErrKindMismatch},
	} {
		if _, err := overrides.PutShared(ctx, s, st, c.o, now); !errors.Is(err, c.want) {
			t.Errorf("PutShared(%v) = %v, want %v", c.o.Match, err, c.want)
		}
	}
	if err := overrides.DeleteShared(ctx, s, st, "tenant_api", m("tenant", "vip_*")); !errors.Is(err, overrides.ErrPolicyOverride) {
		t.Fatalf("DeleteShared of a policy override: %v", err)
	}
	if err := overrides.DeleteShared(ctx, s, st, "tenant_api", m("tenant", "acme")); err != nil {
		t.Fatal(err)
	}
	if err := overrides.DeleteShared(ctx, s, st, "tenant_api", m("tenant", "acme")); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("second DeleteShared: %v", err)
	}
	if s.Resolve("tenant_api", m("tenant", "acme", "user", "u"), now) != nil {
		t.Fatal("a deleted override applies")
	}
}
