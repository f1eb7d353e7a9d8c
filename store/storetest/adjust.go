// The conformance cases of what changes a key after its decision:
// adjustments (settles), bookings (FIFO, all or nothing, cancel), pauses,
// ceilings (Lower) and saturating charges.

package storetest

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/window"
)

// Reserve then settle: a refund before the tokens refill is exact, a late
// one returns nothing, a charge goes into debt; windows likewise within
// their window.
func testAdjust(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := spec(t, 10, 1)
	it := store.Item{Key: "llm", Spec: sp, Cost: 8}
	items := []store.Item{it}
	if _, err := s.Take(context.Background(), items); err != nil || !items[0].Decision.Allowed || items[0].RefundBefore == 0 {
		t.Fatalf("rule: an admitted take reports RefundBefore: %+v %v", items[0], err)
	}
	c.Advance(time.Second)
	adj := store.Adjustment{Key: "llm", Spec: sp, Delta: 3 - 8, RefundBefore: items[0].RefundBefore}
	if err := s.Adjust(context.Background(), []store.Adjustment{adj}); err != nil {
		t.Fatal(err)
	}
	if r := take(t, s, store.Item{Key: "llm", Spec: sp}); r.Decisions[0].Remaining != 8 { // 2 + 1 refilled + 5 back
		t.Fatalf("rule: a refund before RefundBefore returns the cost exactly: %+v", r.Decisions[0])
	}
	if err := s.Adjust(context.Background(), []store.Adjustment{{Key: "llm", Spec: sp, Delta: 12}}); err != nil {
		t.Fatal(err)
	}
	if r := take(t, s, store.Item{Key: "llm", Spec: sp, Cost: 1}); r.Allowed || r.Decisions[0].RetryAfter != 5*time.Second {
		t.Fatalf("rule: a charge goes into debt (12 charged, 4 in debt): %+v", r.Decisions[0])
	}
	// A refund after the tokens refilled returns nothing.
	c.Advance(time.Hour)
	items = []store.Item{{Key: "llm", Spec: sp, Cost: 10}}
	s.Take(context.Background(), items)
	c.Advance(20 * time.Second)
	take(t, s, store.Item{Key: "llm", Spec: sp, Cost: 10})
	s.Adjust(context.Background(), []store.Adjustment{{Key: "llm", Spec: sp, Delta: -10, RefundBefore: items[0].RefundBefore}})
	if r := take(t, s, store.Item{Key: "llm", Spec: sp}); r.Decisions[0].Remaining != 0 {
		t.Fatalf("rule: a refund at or after RefundBefore returns nothing (never creates credit): %+v", r.Decisions[0])
	}
	// Windows: a refund within the window.
	w := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 10, Window: time.Minute}}
	c.Set(Epoch)
	wi := []store.Item{{Key: "w", Spec: w, Cost: 6}}
	s.Take(context.Background(), wi)
	s.Adjust(context.Background(), []store.Adjustment{{Key: "w", Spec: w, Delta: -4, RefundBefore: wi[0].RefundBefore}})
	if r := take(t, s, store.Item{Key: "w", Spec: w}); r.Decisions[0].Remaining != 8 {
		t.Fatalf("rule: a window refund within its window returns the cost: %+v", r.Decisions[0])
	}
}

func book(t *testing.T, s store.Store, maxWait time.Duration, items ...store.Item) (store.Result, []store.Item) {
	t.Helper()
	for i := range items {
		items[i].MaxWait = maxWait
	}
	r, err := s.Take(context.Background(), items)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return r, items
}

// Bookings on one key are served in their order of arrival: each books the
// earliest time its cost is there after the bookings before it, a large
// cost as well as a small one; one that would wait longer than its MaxWait
// is refused and books nothing.
func testBookFIFO(t *testing.T, f Factory) {
	s, _ := open(t, f)
	sp := spec(t, 10, 10)
	take(t, s, store.Item{Key: "q", Spec: sp, Cost: 10}) // empty now
	r, it := book(t, s, time.Second, store.Item{Key: "q", Spec: sp, Cost: 5})
	if !r.Allowed || it[0].Wait != 500*time.Millisecond || r.Wait != 500*time.Millisecond || !it[0].Decision.Allowed || it[0].Decision.Remaining != 0 {
		t.Fatalf("rule: a booking on an empty bucket waits exactly until its cost has refilled (500ms): %+v %+v", r, it[0])
	}
	r, it = book(t, s, time.Second, store.Item{Key: "q", Spec: sp, Cost: 1})
	if !r.Allowed || it[0].Wait != 600*time.Millisecond {
		t.Fatalf("rule: a later booking waits behind the earlier ones (600ms): %+v %+v", r, it[0])
	}
	r, it = book(t, s, time.Second, store.Item{Key: "q", Spec: sp, Cost: 10})
	if r.Allowed || it[0].Wait != 0 {
		t.Fatalf("rule: a booking that would wait longer than MaxWait (1.6s > 1s) is refused: %+v %+v", r, it[0])
	}
	r, it = book(t, s, 2*time.Second, store.Item{Key: "q", Spec: sp, Cost: 10})
	if !r.Allowed || it[0].Wait != 1600*time.Millisecond {
		t.Fatalf("rule: a large cost books its place in line like a small one (1.6s), never starved: %+v %+v", r, it[0])
	}
	r, it = book(t, s, 2*time.Second, store.Item{Key: "q", Spec: sp, Cost: 1})
	if !r.Allowed || it[0].Wait != 1700*time.Millisecond {
		t.Fatalf("rule: the refused booking took nothing; the next waits behind the large one (1.7s): %+v %+v", r, it[0])
	}
	r, it = book(t, s, time.Second, store.Item{Key: "other", Spec: sp, Cost: 3})
	if !r.Allowed || it[0].Wait != 0 || it[0].Decision.Remaining != 7 {
		t.Fatalf("rule: a booking that can be admitted now waits 0, as a take: %+v %+v", r, it[0])
	}
}

// A booking is all or nothing: items of other kinds must admit now, and a
// bucket that would wait too long refuses the whole request; nothing is
// booked anywhere.
func testBookAllOrNothing(t *testing.T, f Factory) {
	s, _ := open(t, f)
	a, b := spec(t, 10, 10), spec(t, 10, 1)
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 1, Window: time.Minute}}
	conc := &store.Spec{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: time.Minute}
	take(t, s, store.Item{Key: "a", Spec: a, Cost: 10}, store.Item{Key: "b", Spec: b, Cost: 10},
		store.Item{Key: "w", Spec: win, Cost: 1}, store.Item{Key: "c", Spec: conc, Cost: 1})
	peekAll := func() []sluice.Decision {
		return take(t, s, store.Item{Key: "a", Spec: a}, store.Item{Key: "b", Spec: b}).Decisions
	}
	before := peekAll()
	for _, items := range [][]store.Item{
		{{Key: "a", Spec: a, Cost: 5}, {Key: "b", Spec: b, Cost: 5}},    // b would wait 5s > 1s
		{{Key: "a", Spec: a, Cost: 5}, {Key: "w", Spec: win, Cost: 1}},  // the window refuses now
		{{Key: "a", Spec: a, Cost: 5}, {Key: "c", Spec: conc, Cost: 1}}, // no slot now
		{{Key: "b", Spec: b, Cost: 1}, {Key: "a", Spec: a, Cost: 10}},   // a would wait 1s... and b 1s: both fit
	}[:3] {
		r, it := book(t, s, time.Second, items...)
		if r.Allowed || r.Wait != 0 {
			t.Fatalf("rule: a booking any item refuses is refused whole: %+v %+v", r, it)
		}
		for _, x := range it {
			if x.Wait != 0 {
				t.Fatalf("rule: a refused booking reports no wait: %+v", x)
			}
		}
	}
	if after := peekAll(); after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("rule: a refused booking books nothing: before %+v, after %+v", before, after)
	}
	r, it := book(t, s, 2*time.Second, store.Item{Key: "a", Spec: a, Cost: 5}, store.Item{Key: "b", Spec: b, Cost: 1})
	if !r.Allowed || it[0].Wait != 500*time.Millisecond || it[1].Wait != time.Second || r.Wait != time.Second {
		t.Fatalf("rule: a booking of several buckets waits for the last of them (1s): %+v %+v", r, it)
	}
}

// Cancelling a booking (Adjust with -Cost before RefundBefore) returns its
// tokens exactly, also when later bookings exist.
func testBookCancel(t *testing.T, f Factory) {
	s, _ := open(t, f)
	sp := spec(t, 10, 10)
	take(t, s, store.Item{Key: "k", Spec: sp, Cost: 10})
	_, first := book(t, s, 2*time.Second, store.Item{Key: "k", Spec: sp, Cost: 5})
	_, second := book(t, s, 2*time.Second, store.Item{Key: "k", Spec: sp, Cost: 1})
	if first[0].Wait != 500*time.Millisecond || second[0].Wait != 600*time.Millisecond {
		t.Fatalf("bookings: %+v %+v", first[0], second[0])
	}
	err := s.Adjust(context.Background(), []store.Adjustment{{Key: "k", Spec: sp, Delta: -5, RefundBefore: first[0].RefundBefore}})
	if err != nil {
		t.Fatal(err)
	}
	_, next := book(t, s, 2*time.Second, store.Item{Key: "k", Spec: sp, Cost: 5})
	if next[0].Wait != 600*time.Millisecond {
		t.Fatalf("rule: a cancelled booking returns its tokens exactly, later bookings kept (the next 5 wait 600ms, after the 1 booked): %+v", next[0])
	}
}

// A pause (Adjustment.Pause) empties a token bucket exactly at its end,
// refusing everything before; it refills from empty after. A shorter
// pause than one in force changes nothing; other kinds are not paused.
func testPause(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := spec(t, 10, 10)
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 5, Window: time.Minute}}
	ctx := context.Background()
	pause := func(d time.Duration, keys ...store.Adjustment) {
		t.Helper()
		for i := range keys {
			keys[i].Pause = d
		}
		if err := s.Adjust(ctx, keys); err != nil {
			t.Fatal(err)
		}
	}
	take(t, s, store.Item{Key: "p", Spec: sp, Cost: 1}) // a state that exists
	pause(time.Second, store.Adjustment{Key: "p", Spec: sp}, store.Adjustment{Key: "new", Spec: sp}, store.Adjustment{Key: "w", Spec: win})
	for _, key := range []string{"p", "new"} {
		if r := take(t, s, store.Item{Key: key, Spec: sp, Cost: 1}); r.Allowed || r.Decisions[0].RetryAfter != 1100*time.Millisecond {
			t.Fatalf("rule: a paused bucket refuses until its pause ends and a token has refilled (1.1s): %s %+v", key, r)
		}
	}
	if r := take(t, s, store.Item{Key: "w", Spec: win, Cost: 5}); !r.Allowed {
		t.Fatalf("rule: a pause does not apply to a window: %+v", r)
	}
	pause(500*time.Millisecond, store.Adjustment{Key: "p", Spec: sp})
	if r := take(t, s, store.Item{Key: "p", Spec: sp, Cost: 1}); r.Allowed || r.Decisions[0].RetryAfter != 1100*time.Millisecond {
		t.Fatalf("rule: a shorter pause than the one in force changes nothing: %+v", r)
	}
	_, it := book(t, s, 2*time.Second, store.Item{Key: "p", Spec: sp, Cost: 2})
	if !it[0].Decision.Allowed || it[0].Wait != 1200*time.Millisecond {
		t.Fatalf("rule: a booking during a pause waits for the pause and the refill (1.2s): %+v", it[0])
	}
	c.Advance(1300 * time.Millisecond)
	if r := take(t, s, store.Item{Key: "new", Spec: sp, Cost: 3}); !r.Allowed || r.Decisions[0].Remaining != 0 {
		t.Fatalf("rule: after the pause the bucket refills from empty (3 tokens 0.3s after it): %+v", r)
	}
}

// Charges however large (a settle's excess) saturate: a window or a quota
// charged past the int64 range twice stays exhausted, never wrapping
// around to empty.
// A ceiling (Adjustment.Lower) leaves a token bucket at most that many
// tokens, exactly, in one step; never raises one; applies to a new key;
// leaves other kinds alone.
func testLower(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := spec(t, 10, 10)
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 5, Window: time.Minute}}
	ctx := context.Background()
	lower := func(n int64, keys ...store.Adjustment) {
		t.Helper()
		for i := range keys {
			keys[i].Lower, keys[i].Delta = true, n
		}
		if err := s.Adjust(ctx, keys); err != nil {
			t.Fatal(err)
		}
	}
	peek := func(key string, sp *store.Spec) sluice.Decision {
		t.Helper()
		return take(t, s, store.Item{Key: key, Spec: sp}).Decisions[0]
	}
	take(t, s, store.Item{Key: "b", Spec: sp, Cost: 2}) // 8 left
	lower(3, store.Adjustment{Key: "b", Spec: sp}, store.Adjustment{Key: "new", Spec: sp}, store.Adjustment{Key: "w", Spec: win})
	for _, key := range []string{"b", "new"} {
		if d := peek(key, sp); d.Remaining != 3 {
			t.Fatalf("rule: a ceiling of 3 leaves a bucket exactly 3 tokens (also a new key): %s %+v", key, d)
		}
	}
	if r := take(t, s, store.Item{Key: "w", Spec: win, Cost: 5}); !r.Allowed {
		t.Fatalf("rule: a ceiling does not apply to a window: %+v", r)
	}
	lower(7, store.Adjustment{Key: "b", Spec: sp})
	if d := peek("b", sp); d.Remaining != 3 {
		t.Fatalf("rule: a ceiling above what a bucket holds never raises it: %+v", d)
	}
	lower(-5, store.Adjustment{Key: "b", Spec: sp})
	if r := take(t, s, store.Item{Key: "b", Spec: sp, Cost: 1}); r.Allowed || r.Decisions[0].RetryAfter != 100*time.Millisecond {
		t.Fatalf("rule: a negative ceiling counts as 0 (one token in 0.1s): %+v", r)
	}
	c.Advance(time.Second)
	lower(10, store.Adjustment{Key: "b", Spec: sp})
	if d := peek("b", sp); d.Remaining != 10 {
		t.Fatalf("rule: a ceiling at the capacity changes nothing (refilled to 10): %+v", d)
	}
}

func testChargesSaturate(t *testing.T, f Factory) {
	s, c := open(t, f)
	q, err := store.NewSpec(store.Limit{Kind: store.Quota, Quota: quota.Limit{Limit: 100, Period: quota.Month}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range []*store.Spec{q,
		{Kind: store.SlidingWindow, Window: window.Limit{Limit: 100, Window: time.Hour}},
		{Kind: store.FixedWindow, Window: window.Limit{Limit: 100, Window: time.Hour}}} {
		key := "sat-" + sp.Kind.String()
		take(t, s, store.Item{Key: key, Spec: sp, Cost: 100})
		for range 2 {
			c.Advance(time.Second)
			if err := s.Adjust(context.Background(), []store.Adjustment{{Key: key, Spec: sp, Delta: math.MaxInt64}}); err != nil {
				t.Fatal(err)
			}
		}
		if r := take(t, s, store.Item{Key: key, Spec: sp, Cost: 1}); r.Allowed {
			t.Fatalf("rule: charges saturate (%s charged past the int64 range stays exhausted): %+v", sp.Kind, r)
		}
	}
}
