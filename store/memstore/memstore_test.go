package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store { return memstore.New(memstore.WithClock(c)) })
}

// The conformance suite again, every Take going through TakeBorrowed with
// keys that alias one buffer, scribbled over after each call: a store that
// kept a borrowed key (a new key's entry, a lease) or handed one back would
// decide wrongly later or fail the key check here.
func TestConformanceBorrowedKeys(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store {
		return &borrowing{Store: memstore.New(memstore.WithClock(c)), t: t}
	})
}

type borrowing struct {
	*memstore.Store
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (b *borrowing) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	orig := make([]string, len(items))
	b.buf = b.buf[:0]
	for i := range items {
		orig[i] = items[i].Key
		b.buf = append(b.buf, items[i].Key...)
	}
	at := 0
	for i := range items {
		if n := len(orig[i]); n > 0 {
			items[i].Key = unsafe.String(&b.buf[at], n)
			at += n
		}
	}
	res, err := b.Store.TakeBorrowed(ctx, items)
	for i := range b.buf {
		b.buf[i] = '#'
	}
	for i := range items {
		if items[i].Key != orig[i] {
			b.t.Errorf("item %d: key %q after TakeBorrowed, want %q", i, items[i].Key, orig[i])
		}
	}
	for _, k := range res.Slots.Keys {
		if strings.Contains(k, "#") {
			b.t.Errorf("lease key %q aliases the caller's buffer", k)
		}
	}
	return res, err
}

// Eviction changes no decision: the same random trace through a store that
// evicts idle keys and through one that keeps every key gives identical
// decisions.
func TestEvictionChangesNoDecision(t *testing.T) {
	t.Parallel()
	c1 := sluice.NewManualClock(storetest.Epoch)
	c2 := sluice.NewManualClock(storetest.Epoch)
	evicting := memstore.New(memstore.WithClock(c1))
	keeping := memstore.New(memstore.WithClock(c2), memstore.NoEviction())
	b1, _ := store.NewBucketSpec(bucket.Limit{Capacity: 5, Rate: 2})
	b2, _ := store.NewBucketSpec(bucket.Limit{Capacity: 50, Rate: 0.5})
	w := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 4, Window: time.Second}}
	specs := []*store.Spec{b1, b2, w}
	rng := rand.New(rand.NewPCG(1, 1))
	var now time.Duration
	for step := range 20000 {
		now += time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
		c1.Set(storetest.Epoch.Add(now))
		c2.Set(storetest.Epoch.Add(now))
		i := rng.IntN(len(specs))
		it := store.Item{Key: fmt.Sprint(i, "/", rng.IntN(40)), Spec: specs[i], Cost: rng.Int64N(specs[i].Capacity()) + 1}
		i1, i2 := []store.Item{it}, []store.Item{it}
		_, err1 := evicting.Take(context.Background(), i1)
		_, err2 := keeping.Take(context.Background(), i2)
		if err1 != nil || err2 != nil || i1[0].Decision != i2[0].Decision {
			t.Fatalf("step %d %s: evicting %+v %v, keeping %+v", step, it.Key, i1[0].Decision, err1, i2[0].Decision)
		}
	}
	st := evicting.Stats()
	if st.Evictions == 0 {
		t.Fatal("nothing was evicted: the test proves nothing")
	}
	if kept := keeping.Stats(); kept.Evictions != 0 || kept.Keys != 120 {
		t.Fatalf("reference evicted: %+v", kept)
	}
	t.Logf("evictions %d, keys now %d", st.Evictions, st.Keys)
}

// The cap holds whatever keys callers invent, and existing keys keep working
// (with WithRefuseWhenFull, new ones are refused; by default each evicts
// the least recently used key: lru_test.go).
func TestKeyCapBoundsMemory(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(6400), memstore.WithRefuseWhenFull())
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 0.001}) // never idle in this test
	var full int
	for i := range 20000 {
		_, err := s.Take(context.Background(), []store.Item{{Key: fmt.Sprint("attacker-", i), Spec: sp, Cost: 1}})
		if errors.Is(err, store.ErrFull) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if k := s.Stats().Keys; k != 6400 || full != 20000-6400 {
		t.Fatalf("keys %d, refused %d", k, full)
	}
	if r, err := s.Take(context.Background(), []store.Item{{Key: "attacker-1", Spec: sp, Cost: 1}}); err != nil || !r.Allowed {
		t.Fatalf("existing key: %+v %v", r, err)
	}
}

// TestBytesPerKey measures the heap held per key with 1,000,000 keys
// beyond the key strings' own bytes (reported, see BENCHMARKS.md), and
// holds it to the target: at most 64 B.
func TestBytesPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 100 MB")
	}
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:%07d", i) // 14 bytes each
	}
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 1})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := memstore.New(memstore.WithMaxKeys(2 * n))
	items := []store.Item{{Spec: sp, Cost: 1}}
	for _, k := range keys {
		items[0].Key = k
		if _, err := s.Take(context.Background(), items); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d keys: %.1f bytes per key held (key strings are shared with the caller, not counted)", s.Stats().Keys, per)
	if per > 64 { // the target: at most 64 B a key beyond its string
		t.Errorf("%.1f bytes per key held, above the 64 B target", per)
	}
	runtime.KeepAlive(keys)
	runtime.KeepAlive(s)
}

// Making room for a new key may evict an idle key that the same request
// also takes from; what that request took must not be lost.
func TestRoomMadeKeepsTheRequestsOwnTake(t *testing.T) {
	t.Parallel()
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 5, Rate: 1})
	for try := range 1000 {
		c := sluice.NewManualClock(storetest.Epoch)
		s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(2))
		a := store.Item{Key: "a", Spec: sp, Cost: 1}
		// c is the other idle key: evicting it makes the room, and
		// evicting a (in a shard the request holds) is not enough.
		if _, err := s.Take(context.Background(), []store.Item{a, {Key: "c", Spec: sp, Cost: 1}}); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Minute) // a and c are full again: idle
		a.Cost = 5
		_, err := s.Take(context.Background(), []store.Item{a, {Key: fmt.Sprint("b", try), Spec: sp, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		peek := []store.Item{{Key: "a", Spec: sp}}
		if _, err := s.Take(context.Background(), peek); err != nil {
			t.Fatal(err)
		}
		if peek[0].Decision.Remaining != 0 {
			t.Fatalf("try %d: a took 5 but holds %d", try, peek[0].Decision.Remaining)
		}
	}
}

// A bucket charged into debt must not be evicted (which would forget the
// debt) while sweeps and room-making look for idle keys. (A charge's debt
// is capped at one capacity, here 2000 s to repay; idle times saturate
// rather than overflow for deeper states.)
func TestDebtIsNotEvicted(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(64), memstore.WithRefuseWhenFull()) // (lru_test.go: an LRU eviction of debt)
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 1, Rate: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	items := []store.Item{{Key: "k", Spec: sp, Cost: 1}}
	if _, err := s.Take(ctx, items); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second) // a later time: now + the longest wait overflows
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "k", Spec: sp, Delta: 1 << 50}}); err != nil {
		t.Fatal(err)
	}
	// Many other keys: sweeps and room-making look for idle keys.
	for i := range 2000 {
		c.Advance(100 * time.Millisecond)
		s.Take(ctx, []store.Item{{Key: fmt.Sprint("o", i), Spec: sp, Cost: 1}})
	}
	peek := []store.Item{{Key: "k", Spec: sp}}
	if _, err := s.Take(ctx, peek); err != nil {
		t.Fatal(err)
	}
	if peek[0].Decision.Allowed {
		t.Fatalf("the debt was forgotten: %+v", peek[0].Decision)
	}
}

// Keys lent to TakeBorrowed come back owned on every path, errors included.
func TestTakeBorrowedOwnsKeysOnErrors(t *testing.T) {
	t.Parallel()
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 5, Rate: 1})
	for name, tc := range map[string]struct {
		s     *memstore.Store
		items func(buf []byte) []store.Item
		want  error
	}{
		"closed": {s: func() *memstore.Store { s := memstore.New(); s.Close(); return s }(),
			items: func(b []byte) []store.Item { return []store.Item{{Key: unsafe.String(&b[0], 3), Spec: sp, Cost: 1}} },
			want:  store.ErrClosed},
		"invalid": {s: memstore.New(),
			items: func(b []byte) []store.Item { return []store.Item{{Key: unsafe.String(&b[0], 3), Spec: sp, Cost: 9}} },
			want:  store.ErrInvalidItem},
		"full": {s: memstore.New(memstore.WithMaxKeys(1), memstore.NoEviction()),
			items: func(b []byte) []store.Item {
				return []store.Item{{Key: unsafe.String(&b[0], 3), Spec: sp, Cost: 1}, {Key: unsafe.String(&b[3], 3), Spec: sp, Cost: 1}}
			},
			want: store.ErrFull},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "full" { // fill every shard's share (1 key each) first
				for i := range 1000 {
					tc.s.Take(context.Background(), []store.Item{{Key: fmt.Sprint("fill", i), Spec: sp, Cost: 1}})
				}
			}
			buf := []byte("abcdef")
			items := tc.items(buf)
			want := make([]string, len(items))
			for i := range items {
				want[i] = strings.Clone(items[i].Key)
			}
			_, err := tc.s.TakeBorrowed(context.Background(), items)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			copy(buf, "######")
			for i := range items {
				if items[i].Key != want[i] {
					t.Errorf("item %d: key %q after the call, want %q", i, items[i].Key, want[i])
				}
			}
		})
	}
}

// A refused request whose new key made room by evicting the entry of an
// earlier item must still hand back that item's key (not the evicted
// entry's, which is gone).
func TestTakeBorrowedRefusalAfterEviction(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(2)) // a and z: full
	idle, _ := store.NewBucketSpec(bucket.Limit{Capacity: 5, Rate: 1000})
	tight, _ := store.NewBucketSpec(bucket.Limit{Capacity: 1, Rate: 0.001})
	ctx := context.Background()
	// a and b share a shard; z is elsewhere. b's new key makes room by
	// evicting a.
	a, b, z := "a", "", ""
	for i := 0; b == "" || z == ""; i++ {
		k := fmt.Sprint("k", i)
		switch {
		case b == "" && s.ShardOf(k) == s.ShardOf(a):
			b = k
		case z == "" && s.ShardOf(k) != s.ShardOf(a):
			z = k
		}
	}
	s.Take(ctx, []store.Item{{Key: a, Spec: idle, Cost: 1}})
	s.Take(ctx, []store.Item{{Key: z, Spec: tight, Cost: 1}}) // z is now empty for ~1000 s
	c.Advance(time.Second)                                    // a is full again: idle, evictable
	buf := []byte(a + b + z)
	items := []store.Item{
		{Key: unsafe.String(&buf[0], len(a)), Spec: idle, Cost: 0}, // a peek of a: finds its entry
		{Key: unsafe.String(&buf[len(a)], len(b)), Spec: idle, Cost: 1},
		{Key: unsafe.String(&buf[len(a)+len(b)], len(z)), Spec: tight, Cost: 1},
	}
	r, err := s.TakeBorrowed(ctx, items)
	if err != nil || r.Allowed {
		t.Fatalf("want a refusal: %+v %v", r, err)
	}
	if ev := s.Stats().Evictions; ev != 1 {
		t.Fatalf("%d evictions: a was not evicted to make room for b", ev)
	}
	copy(buf, strings.Repeat("#", len(buf)))
	for i, want := range []string{a, b, z} {
		if items[i].Key != want {
			t.Errorf("item %d: key %q, want %q", i, items[i].Key, want)
		}
	}
}
