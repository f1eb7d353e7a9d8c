// The kind table: every kind listed, named, parsed and compiled; its
// traits, shape, log attributes and conversions.

package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/window"
)

// Every kind is listed, named, parsed back and compiled; an added kind
// missing from one of the tables fails here.
func TestKinds(t *testing.T) {
	ks := store.Kinds()
	seen := map[store.Kind]bool{}
	for _, k := range ks {
		if seen[k] {
			t.Errorf("%v listed twice", k)
		}
		seen[k] = true
		if k.String() == "unknown" {
			t.Errorf("kind %d has no name", k)
		}
		if p, err := store.ParseKind(k.String()); err != nil || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, p, err)
		}
	}
	for k := store.Kind(0); k.String() != "unknown"; k++ {
		if !seen[k] {
			t.Errorf("kind %v (%d) is not in Kinds()", k, k)
		}
	}
	if store.Kind(200).String() != "unknown" {
		t.Error("an unknown kind has a name")
	}
	if _, err := store.ParseKind("leaky"); err == nil {
		t.Error("leaky parsed")
	}
	limits := map[store.Kind]store.Limit{
		store.TokenBucket:   {Kind: store.TokenBucket, Bucket: bucket.PerSecond(5)},
		store.SlidingWindow: {Kind: store.SlidingWindow, Window: window.Limit{Limit: 5, Window: time.Second}},
		store.FixedWindow:   {Kind: store.FixedWindow, Window: window.Limit{Limit: 5, Window: time.Second}},
		store.Concurrency:   {Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: time.Second},
		store.Quota:         {Kind: store.Quota, Quota: quota.Limit{Limit: 5, Period: quota.Day}},
	}
	for _, k := range ks {
		l, ok := limits[k]
		if !ok {
			t.Errorf("no test limit for %v", k)
			continue
		}
		sp, err := store.NewSpec(l)
		if err != nil || sp.Kind != k || sp.Capacity() != 5 || l.Capacity() != 5 {
			t.Errorf("%v: %+v %v", k, sp, err)
		}
		if _, err := store.NewSpec(store.Limit{Kind: k}); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%v: a zero limit compiled: %v", k, err)
		}
	}
}

// testLimits are a limit of each kind, every one of capacity 5.
func testLimits() map[store.Kind]store.Limit {
	return map[store.Kind]store.Limit{
		store.TokenBucket:   {Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 5, Rate: 2.5}},
		store.SlidingWindow: {Kind: store.SlidingWindow, Window: window.Limit{Limit: 5, Window: 2 * time.Second}},
		store.FixedWindow:   {Kind: store.FixedWindow, Window: window.Limit{Limit: 5, Window: 2 * time.Second}},
		store.Concurrency:   {Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: 30 * time.Second},
		store.Quota:         {Kind: store.Quota, Quota: quota.Limit{Limit: 5, Period: quota.Week}},
	}
}

// Each kind's traits, as the table states them; none for a value that is
// no kind.
func TestKindTraits(t *testing.T) {
	t.Parallel()
	type traits struct{ slots, pausable, books, leasable, convertible bool }
	want := map[store.Kind]traits{
		store.TokenBucket:   {pausable: true, books: true, leasable: true, convertible: true},
		store.SlidingWindow: {convertible: true},
		store.FixedWindow:   {convertible: true},
		store.Concurrency:   {slots: true},
		store.Quota:         {},
		store.Kind(200):     {},
	}
	for k, w := range want {
		got := traits{k.HoldsSlots(), k.Pausable(), k.Books(), k.Leasable(), k.Convertible()}
		if got != w {
			t.Errorf("%v: traits %+v, want %+v", k, got, w)
		}
	}
	for _, k := range store.Kinds() {
		if _, ok := want[k]; !ok {
			t.Errorf("%v: no traits stated in this test", k)
		}
		l := testLimits()[k]
		sp, err := store.NewSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		if sp.HoldsSlots() != k.HoldsSlots() {
			t.Errorf("%v: Spec.HoldsSlots %v", k, sp.HoldsSlots())
		}
		if _, _, ok := sp.Pause(store.State{}, false, store.Now{}, time.Second); ok != k.Pausable() {
			t.Errorf("%v: Pause applied %v", k, ok)
		}
		if k.HoldsSlots() {
			continue
		}
		if _, _, ok := sp.Lower(store.State{}, false, store.Now{}, 1); ok != k.Pausable() {
			t.Errorf("%v: Lower applied %v", k, ok)
		}
		if _, dec, wait := sp.Book(store.State{}, false, store.Now{}, 5, time.Second); !dec.Allowed || wait != 0 {
			t.Errorf("%v: a booking on a full state: %+v, wait %v", k, dec, wait)
		}
		if k.Pausable() && sp.Rate() <= 0 {
			t.Errorf("%v: Pausable with Rate %v", k, sp.Rate())
		}
	}
}

// Shape and LogAttrs state each kind's terms in its own words.
func TestShapeAndLogAttrs(t *testing.T) {
	t.Parallel()
	want := map[store.Kind]struct {
		shape store.Shape
		logs  string
	}{
		store.TokenBucket: {store.Shape{Capacity: 5, Rate: 2.5},
			"bucket_capacity=5 refill_per_second=2.5 token_cost=2 tokens_remaining=1"},
		store.SlidingWindow: {store.Shape{Capacity: 5, Window: 2 * time.Second, Span: 2 * time.Second},
			"window_limit=5 window_ms=2000 token_cost=2 tokens_remaining=1"},
		store.FixedWindow: {store.Shape{Capacity: 5, Window: 2 * time.Second, Span: 2 * time.Second},
			"window_limit=5 window_ms=2000 token_cost=2 tokens_remaining=1"},
		store.Concurrency: {store.Shape{Capacity: 5, SlotTTL: 30 * time.Second, Span: 30 * time.Second},
			"max_in_flight=5 in_flight=4"},
		store.Quota: {store.Shape{Capacity: 5, Period: "week", Timezone: "UTC", Span: 7 * 24 * time.Hour},
			"quota_limit=5 period=week timezone=UTC token_cost=2 tokens_remaining=1"},
	}
	for k, l := range testLimits() {
		w := want[k]
		if got := l.Shape(); got != w.shape {
			t.Errorf("%v: Shape %+v, want %+v", k, got, w.shape)
		}
		if l.Capacity() != w.shape.Capacity || l.Span() != w.shape.Span {
			t.Errorf("%v: Capacity %d, Span %v", k, l.Capacity(), l.Span())
		}
		var logs []string
		for _, a := range l.LogAttrs(nil, 2, 1) {
			logs = append(logs, a.String())
		}
		if got := strings.Join(logs, " "); got != w.logs {
			t.Errorf("%v: LogAttrs %s, want %s", k, got, w.logs)
		}
	}
	none := store.Limit{Kind: 200}
	if none.Shape() != (store.Shape{}) || len(none.LogAttrs(nil, 1, 1)) != 0 {
		t.Error("a value that is no kind has a shape")
	}
}

// As counts a capacity and a rate by another convertible kind, and
// refuses the others.
func TestAs(t *testing.T) {
	t.Parallel()
	ls := testLimits()
	tb, sw := ls[store.TokenBucket], ls[store.SlidingWindow]
	if got, err := tb.As(store.FixedWindow); err != nil || got.Kind != store.FixedWindow || got.Window != (window.Limit{Limit: 5, Window: 2 * time.Second}) || got.Bucket != tb.Bucket {
		t.Errorf("token bucket as a fixed window: %+v, %v", got, err)
	}
	if got, err := sw.As(store.TokenBucket); err != nil || got.Kind != store.TokenBucket || got.Bucket != (bucket.Limit{Capacity: 5, Rate: 2.5}) {
		t.Errorf("sliding window as a token bucket: %+v, %v", got, err)
	}
	if got, err := sw.As(store.FixedWindow); err != nil || got.Kind != store.FixedWindow || got.Window != sw.Window {
		t.Errorf("sliding window as a fixed window: %+v, %v", got, err)
	}
	if got, err := sw.As(store.SlidingWindow); err != nil || got != sw {
		t.Errorf("as its own kind: %+v, %v", got, err)
	}
	for _, bad := range [][2]store.Kind{{store.Concurrency, store.TokenBucket}, {store.TokenBucket, store.Quota}} {
		l := ls[bad[0]]
		if _, err := l.As(bad[1]); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%v as %v: %v", bad[0], bad[1], err)
		}
	}
	slow := store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1 << 60, Rate: 1e-9}}
	if _, err := slow.As(store.SlidingWindow); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("a window longer than a Duration: %v", err)
	}
}
