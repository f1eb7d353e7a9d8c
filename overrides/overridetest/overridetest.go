// Package overridetest is the conformance suite of overrides.Store
// implementations, in the manner of testing/slogtest: an implementation's
// test calls Run with a Harness that makes stores, and every guarantee of
// the Store interface is checked against it.
package overridetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

// Harness makes the stores under test.
type Harness struct {
	// New returns an empty store whose cap on live overrides is max
	// (overrides.ErrTooMany past it). Stores made by one Harness must
	// not share data.
	New func(t *testing.T, max int) overrides.Store
	// Reopen, when set, closes s and returns a store over the same data
	// (a restart of every instance); the persistence cases run only with
	// it.
	Reopen func(t *testing.T, s overrides.Store) overrides.Store
}

// Run runs every case of the suite as a subtest of t.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		f    func(t *testing.T, h Harness)
	}{
		{"PutThenFull", testPutThenFull},
		{"RoundTrip", testRoundTrip},
		{"ReplaceKeepsCreatedAt", testReplaceKeepsCreatedAt},
		{"Incremental", testIncremental},
		{"DeleteNotFound", testDeleteNotFound},
		{"Max", testMax},
		{"Expiry", testExpiry},
		{"FutureSince", testFutureSince},
		{"Concurrent", testConcurrent},
		{"Persistence", testPersistence},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, h) })
	}
}

var ctx = context.Background()

// Record returns a valid, stamped API override of limit name matching
// tenant (with ttl seconds when positive).
func Record(name, tenant string, capacity int64, ttl int64) overrides.Override {
	o := overrides.Override{Name: name, Match: map[string]string{"tenant": tenant},
		Params: overrides.Params{Capacity: capacity}, TTL: ttl, Source: overrides.SourceAPI}
	o.Stamp(time.Now(), time.Time{})
	return o
}

func put(t *testing.T, s overrides.Store, o overrides.Override) overrides.Override {
	t.Helper()
	got, err := s.Put(ctx, o)
	if err != nil {
		t.Fatalf("Put(%s %v): %v", o.Name, o.Match, err)
	}
	return got
}

func changes(t *testing.T, s overrides.Store, since uint64) overrides.Changes {
	t.Helper()
	ch, err := s.Changes(ctx, since)
	if err != nil {
		t.Fatalf("Changes(%d): %v", since, err)
	}
	return ch
}

// byKey indexes records by key, failing on a key given twice.
func byKey(t *testing.T, recs []overrides.Override) map[overrides.Key]overrides.Override {
	t.Helper()
	m := map[overrides.Key]overrides.Override{}
	for _, o := range recs {
		if _, dup := m[o.Key()]; dup {
			t.Fatalf("record %v reported twice", o.Key())
		}
		m[o.Key()] = o
	}
	return m
}

func newStore(t *testing.T, h Harness, max int) overrides.Store {
	s := h.New(t, max)
	t.Cleanup(func() { s.Close() })
	return s
}

func testPutThenFull(t *testing.T, h Harness) {
	s := newStore(t, h, 100)
	ch := changes(t, s, 0)
	if !ch.Full || len(ch.Records) != 0 {
		t.Fatalf("an empty store's Changes(0) = %+v, want Full and no records", ch)
	}
	a, b := put(t, s, Record("l", "a", 5, 0)), put(t, s, Record("l", "b", 6, 0))
	ch = changes(t, s, 0)
	got := byKey(t, ch.Records)
	if !ch.Full || len(got) != 2 || got[a.Key()].Capacity != 5 || got[b.Key()].Capacity != 6 {
		t.Fatalf("Changes(0) after two puts = %+v", ch)
	}
	if ch.Version == 0 {
		t.Fatal("version 0 after puts: 0 is reserved for a first Changes")
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	s := newStore(t, h, 100)
	o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "ac:me{x}\u00e9\"", "user": "premium_*", "route": "*"},
		Params: overrides.Params{Capacity: 500, Refill: "100/m", BlockFor: 10 * time.Minute, Shadow: true},
		TTL:    3600, Note: "trial \u2603 <b>", Source: overrides.SourceAPI}
	o.Stamp(time.Now(), time.Now().Add(-time.Hour))
	stored := put(t, s, o)
	if !reflect.DeepEqual(stored, o) {
		t.Fatalf("Put returned\n%+v\nwant\n%+v", stored, o)
	}
	got := byKey(t, changes(t, s, 0).Records)[o.Key()]
	if !reflect.DeepEqual(got, o) {
		t.Fatalf("the record read back is\n%+v\nwant\n%+v", got, o)
	}
	d := overrides.Override{Name: "x", Match: map[string]string{}, Params: overrides.Params{Deny: true}, Source: overrides.SourceAPI}
	d.Stamp(time.Now(), time.Time{})
	put(t, s, d)
	if got := byKey(t, changes(t, s, 0).Records)[d.Key()]; !got.Deny || len(got.Match) != 0 || !got.ExpiresAt.IsZero() {
		t.Fatalf("deny with an empty match read back as %+v", got)
	}
}

func testReplaceKeepsCreatedAt(t *testing.T, h Harness) {
	s := newStore(t, h, 100)
	first := Record("l", "a", 5, 0)
	first.Stamp(time.Now().Add(-time.Hour), time.Time{})
	put(t, s, first)
	second := Record("l", "a", 9, 60)
	got := put(t, s, second)
	if !got.CreatedAt.Equal(first.CreatedAt) || !got.UpdatedAt.Equal(second.UpdatedAt) || got.Capacity != 9 || !got.ExpiresAt.Equal(second.ExpiresAt) {
		t.Fatalf("a replacement stored %+v: want the first CreatedAt %v and the rest of %+v", got, first.CreatedAt, second)
	}
	if rec := byKey(t, changes(t, s, 0).Records)[first.Key()]; !reflect.DeepEqual(rec, got) {
		t.Fatalf("read back %+v, Put returned %+v", rec, got)
	}
}

func testIncremental(t *testing.T, h Harness) {
	s := newStore(t, h, 100)
	a := put(t, s, Record("l", "a", 1, 0))
	put(t, s, Record("l", "b", 2, 0))
	v := changes(t, s, 0).Version
	if ch := changes(t, s, v); ch.Full || len(ch.Records)+len(ch.Deleted) != 0 || ch.Version != v {
		t.Fatalf("Changes(current) = %+v, want nothing at version %d", ch, v)
	}
	put(t, s, Record("l", "c", 3, 0))
	put(t, s, Record("l", "c", 4, 0)) // twice: reported once, as it is
	if err := s.Delete(ctx, "l", map[string]string{"tenant": "b"}); err != nil {
		t.Fatal(err)
	}
	put(t, s, Record("l", "d", 5, 0))
	if err := s.Delete(ctx, "l", map[string]string{"tenant": "d"}); err != nil {
		t.Fatal(err)
	}
	ch := changes(t, s, v)
	if ch.Full {
		t.Fatalf("Changes(%d) answered Full", v)
	}
	recs := byKey(t, ch.Records)
	c := overrides.KeyOf("l", map[string]string{"tenant": "c"})
	if len(recs) != 1 || recs[c].Capacity != 4 {
		t.Fatalf("records since %d: %+v, want only c with capacity 4", v, ch.Records)
	}
	del := map[overrides.Key]bool{}
	for _, k := range ch.Deleted {
		del[k] = true
	}
	b, d := overrides.KeyOf("l", map[string]string{"tenant": "b"}), overrides.KeyOf("l", map[string]string{"tenant": "d"})
	if len(del) != 2 || !del[b] || !del[d] || len(ch.Deleted) != 2 {
		t.Fatalf("deleted since %d: %v, want b and d once each", v, ch.Deleted)
	}
	if ch.Version <= v {
		t.Fatalf("version %d after changes, was %d", ch.Version, v)
	}
	if full := byKey(t, changes(t, s, 0).Records); len(full) != 2 || full[a.Key()].Capacity != 1 || full[c].Capacity != 4 {
		t.Fatalf("Full after the changes: %v", full)
	}
}

func testDeleteNotFound(t *testing.T, h Harness) {
	s := newStore(t, h, 100)
	if err := s.Delete(ctx, "l", map[string]string{"tenant": "a"}); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("Delete of nothing = %v, want ErrNotFound", err)
	}
	put(t, s, Record("l", "a", 1, 0))
	if err := s.Delete(ctx, "l", map[string]string{"tenant": "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "l", map[string]string{"tenant": "a"}); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("a second Delete = %v, want ErrNotFound", err)
	}
}

func testMax(t *testing.T, h Harness) {
	s := newStore(t, h, 2)
	put(t, s, Record("l", "a", 1, 0))
	put(t, s, Record("m", "b", 1, 0))
	v := changes(t, s, 0).Version
	if _, err := s.Put(ctx, Record("l", "c", 1, 0)); !errors.Is(err, overrides.ErrTooMany) {
		t.Fatalf("a third override under a cap of 2: %v, want ErrTooMany", err)
	}
	if ch := changes(t, s, v); len(ch.Records)+len(ch.Deleted) != 0 {
		t.Fatalf("a refused Put changed %+v", ch)
	}
	put(t, s, Record("l", "a", 7, 0)) // a replacement at the cap
	if err := s.Delete(ctx, "m", map[string]string{"tenant": "b"}); err != nil {
		t.Fatal(err)
	}
	put(t, s, Record("l", "c", 1, 0))
}

func testExpiry(t *testing.T, h Harness) {
	s := newStore(t, h, 2)
	short := Record("l", "short", 1, 0)
	short.ExpiresAt = time.Now().Add(300 * time.Millisecond).UTC().Truncate(time.Millisecond)
	put(t, s, short)
	put(t, s, Record("l", "long", 1, 3600))
	v := changes(t, s, 0).Version
	time.Sleep(time.Until(short.ExpiresAt) + 50*time.Millisecond)
	ch := changes(t, s, v)
	if ch.Full {
		t.Fatalf("Changes(%d) answered Full", v)
	}
	if len(ch.Deleted) != 1 || ch.Deleted[0] != short.Key() || len(ch.Records) != 0 {
		t.Fatalf("after the expiry, Changes(%d) = %+v, want short deleted", v, ch)
	}
	if full := byKey(t, changes(t, s, 0).Records); len(full) != 1 {
		t.Fatalf("Full after the expiry holds %d records, want 1", len(full))
	}
	if err := s.Delete(ctx, "l", short.Match); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("Delete of an expired override = %v, want ErrNotFound", err)
	}
	put(t, s, Record("l", "new", 1, 0)) // the expired one does not count against the cap
}

func testFutureSince(t *testing.T, h Harness) {
	s := newStore(t, h, 100)
	put(t, s, Record("l", "a", 1, 0))
	v := changes(t, s, 0).Version
	if ch := changes(t, s, v+1000); !ch.Full || len(ch.Records) != 1 {
		t.Fatalf("Changes(a version the store never had) = %+v, want Full", ch)
	}
}

func testConcurrent(t *testing.T, h Harness) {
	s := newStore(t, h, 1000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if _, err := s.Put(ctx, Record("l", fmt.Sprintf("w%d-%d", w, i), 1, 0)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(byKey(t, changes(t, s, 0).Records)); n != 100 {
		t.Fatalf("%d records after 100 concurrent puts", n)
	}
}

func testPersistence(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("the harness has no Reopen")
	}
	s := h.New(t, 100)
	a := put(t, s, Record("l", "a", 3, 3600))
	put(t, s, Record("l", "b", 4, 0))
	if err := s.Delete(ctx, "l", map[string]string{"tenant": "b"}); err != nil {
		t.Fatal(err)
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { s.Close() })
	got := byKey(t, changes(t, s, 0).Records)
	if len(got) != 1 || !reflect.DeepEqual(got[a.Key()], a) {
		t.Fatalf("after a restart the store holds %+v, want only %+v", got, a)
	}
}
