// Package booktest is the conformance suite of book.Book implementations:
// every Book (in memory, on Redis) passes it.
package booktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
)

// Factory returns a new, empty Book bounded by cfg.
type Factory func(t *testing.T, cfg book.Config) book.Book

// Run runs the suite, its cases in a fixed order, each named after the
// rule it checks. It reads real time: windows are short (a few hundred
// milliseconds) and waits have slack for a loaded machine.
func Run(t *testing.T, f Factory) {
	for _, c := range []struct {
		name string
		test func(*testing.T, Factory)
	}{
		{"SameRequestGetsTheFirstAnswer", testSameRequest},
		{"ReusedIDIsAMismatch", testMismatch},
		{"FailedFirstIsForgotten", testForgotten},
		{"ReceiptSettlesOnce", testSettleOnce},
		{"RefusedCheckKeepsTheReceipt", testCheckRefuses},
		{"UnknownLease", testUnknown},
		{"ReceiptsCappedOldestDropped", testReceiptCap},
		{"SlotsOutliveTheCap", testSlotsOutliveCap},
		{"SlotsOutliveTheWindow", testSlotsOutliveWindow},
		{"ReceiptsExpire", testReceiptsExpire},
		{"BinaryReceiptKeptExactly", testBinaryReceipt},
		{"ReceiptWithItsSlots", testReceiptSlots},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, f) })
	}
}

var ctx = context.Background()

func addRecord(t *testing.T, b book.Book, r book.Record) string {
	t.Helper()
	id, err := b.AddRecord(ctx, r)
	if err != nil || id == "" {
		t.Fatalf("AddRecord: %q, %v", id, err)
	}
	return id
}

func slots(id string) store.Slots { return store.Slots{ID: "slot-" + id, Keys: []string{"c:" + id}} }

// Rule: a request retried with its request_id gets the first answer.
func testSameRequest(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	if _, owner, err := b.Begin(ctx, "r1", "fp1"); !owner || err != nil {
		t.Fatalf("rule: the first claim of an id owns it: owner %v, %v", owner, err)
	}
	b.Finish(ctx, "r1", "fp1", []byte("answer one"))
	ans, owner, err := b.Begin(ctx, "r1", "fp1")
	if owner || err != nil || string(ans) != "answer one" {
		t.Fatalf("rule: the same request retried gets the first answer: %q, owner %v, %v", ans, owner, err)
	}
}

// Rule: an id reused by a request with another fingerprint is refused,
// while pending and once answered.
func testMismatch(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	b.Begin(ctx, "r2", "fp-a")
	if _, _, err := b.Begin(ctx, "r2", "fp-b"); !errors.Is(err, book.ErrMismatch) {
		t.Fatalf("rule: a pending id reused by another request is ErrMismatch, got %v", err)
	}
	b.Finish(ctx, "r2", "fp-a", []byte("a"))
	if _, _, err := b.Begin(ctx, "r2", "fp-b"); !errors.Is(err, book.ErrMismatch) {
		t.Fatalf("rule: an answered id reused by another request is ErrMismatch, got %v", err)
	}
}

// Rule: Finish with no answer forgets the id, so a retry decides anew.
func testForgotten(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	b.Begin(ctx, "r3", "fp")
	b.Finish(ctx, "r3", "fp", nil)
	if _, owner, err := b.Begin(ctx, "r3", "fp"); !owner || err != nil {
		t.Fatalf("rule: a forgotten id is owned by the next claim: owner %v, %v", owner, err)
	}
}

// Rule: a receipt is taken once; then ErrSettled. A record without a
// receipt is ErrSettled too (nothing to settle).
func testSettleOnce(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	id := addRecord(t, b, book.Record{Receipt: []byte("rc")})
	if rc, err := b.TakeReceipt(ctx, id, nil); err != nil || string(rc) != "rc" {
		t.Fatalf("rule: a receipt is taken once: %q, %v", rc, err)
	}
	if _, err := b.TakeReceipt(ctx, id, nil); !errors.Is(err, book.ErrSettled) {
		t.Fatalf("rule: a second take is ErrSettled, got %v", err)
	}
	noRc := addRecord(t, b, book.Record{Slots: slots("x"), SlotsTTL: time.Minute})
	if _, err := b.TakeReceipt(ctx, noRc, nil); !errors.Is(err, book.ErrSettled) {
		t.Fatalf("rule: a record without a receipt has nothing to settle (ErrSettled), got %v", err)
	}
}

// Rule: a receipt whose check fails is not taken: the check's error is
// returned and a later take gets it.
func testCheckRefuses(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	id := addRecord(t, b, book.Record{Receipt: []byte("rc")})
	bad := errors.New("too big")
	if _, err := b.TakeReceipt(ctx, id, func(rc []byte) error {
		if string(rc) != "rc" {
			t.Errorf("check saw %q", rc)
		}
		return bad
	}); err != bad {
		t.Fatalf("rule: a failing check's error is returned: %v", err)
	}
	if rc, err := b.TakeReceipt(ctx, id, func([]byte) error { return nil }); err != nil || string(rc) != "rc" {
		t.Fatalf("rule: a receipt whose check failed is still there: %q, %v", rc, err)
	}
	if _, err := b.TakeReceipt(ctx, id, func([]byte) error { return nil }); !errors.Is(err, book.ErrSettled) {
		t.Fatalf("rule: once taken, ErrSettled: %v", err)
	}
}

// Rule: ids never issued are ErrUnknown, for slots and receipts.
func testUnknown(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	for _, id := range []string{"nope", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", ""} {
		if _, err := b.Slots(ctx, id); !errors.Is(err, book.ErrUnknown) {
			t.Errorf("rule: an unknown receipt id's slots are ErrUnknown: %q: %v", id, err)
		}
		if _, err := b.TakeReceipt(ctx, id, nil); !errors.Is(err, book.ErrUnknown) {
			t.Errorf("rule: an unknown receipt id's receipt is ErrUnknown: %q: %v", id, err)
		}
	}
}

// Rule: beyond MaxReceipts the oldest receipts are dropped (ErrDropped,
// counted), the newer ones kept.
func testReceiptCap(t *testing.T, f Factory) {
	b := f(t, book.Config{MaxReceipts: 10})
	var ids []string
	for i := range 13 {
		ids = append(ids, addRecord(t, b, book.Record{Receipt: fmt.Appendf(nil, "rc%d", i)}))
	}
	for i, id := range ids {
		rc, err := b.TakeReceipt(ctx, id, nil)
		switch {
		case i < 3 && !errors.Is(err, book.ErrDropped):
			t.Errorf("rule: the oldest receipts beyond the cap are dropped: %d: %q, %v", i, rc, err)
		case i >= 3 && (err != nil || string(rc) != fmt.Sprint("rc", i)):
			t.Errorf("rule: receipts within the cap are kept: %d: %q, %v", i, rc, err)
		}
	}
	if n := b.Dropped(); n != 3 {
		t.Errorf("rule: drops are counted: Dropped() = %d, want 3", n)
	}
}

// Rule: a record holding in-flight slots is not dropped by the cap on
// receipts: its slots are there to release (its receipt may be dropped).
func testSlotsOutliveCap(t *testing.T, f Factory) {
	b := f(t, book.Config{MaxReceipts: 5})
	id := addRecord(t, b, book.Record{Slots: slots("held"), SlotsTTL: time.Minute, Receipt: []byte("rc")})
	for range 50 {
		addRecord(t, b, book.Record{Receipt: []byte("other")})
	}
	got, err := b.Slots(ctx, id)
	if err != nil || got.ID != slots("held").ID || len(got.Keys) != 1 {
		t.Fatalf("rule: slots outlive the cap on receipts: %+v, %v", got, err)
	}
	if _, err := b.TakeReceipt(ctx, id, nil); !errors.Is(err, book.ErrDropped) {
		t.Fatalf("rule: its receipt was dropped: %v", err)
	}
}

// Rule: a record holding slots lives until they expire, even past the
// receipt window; then it is unknown.
func testSlotsOutliveWindow(t *testing.T, f Factory) {
	b := f(t, book.Config{ReceiptWindow: 200 * time.Millisecond})
	id := addRecord(t, b, book.Record{Slots: slots("long"), SlotsTTL: 1500 * time.Millisecond})
	time.Sleep(400 * time.Millisecond)
	if got, err := b.Slots(ctx, id); err != nil || got.ID == "" {
		t.Fatalf("rule: slots outlive the receipt window until their TTL: %+v, %v", got, err)
	}
	time.Sleep(2500 * time.Millisecond) // past the TTL, with slack (Redis expires keys on access)
	if _, err := b.Slots(ctx, id); !errors.Is(err, book.ErrUnknown) {
		t.Fatalf("rule: after its slots' TTL and the window its receipt id is unknown: %v", err)
	}
}

// Rule: a receipt past the receipt window is gone (ErrUnknown), not dropped.
func testReceiptsExpire(t *testing.T, f Factory) {
	b := f(t, book.Config{ReceiptWindow: 200 * time.Millisecond})
	id := addRecord(t, b, book.Record{Receipt: []byte("rc")})
	time.Sleep(700 * time.Millisecond)
	if _, err := b.TakeReceipt(ctx, id, nil); !errors.Is(err, book.ErrUnknown) {
		t.Fatalf("rule: a receipt past the receipt window is ErrUnknown: %v", err)
	}
	if b.Dropped() != 0 {
		t.Fatalf("rule: expiry is not a drop: Dropped() = %d", b.Dropped())
	}
}

// Rule: a receipt is any bytes (limiter.Receipt's compact form is binary):
// every byte value comes back exactly, with slots held or not.
func testBinaryReceipt(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	rc := make([]byte, 512)
	for i := range rc {
		rc[i] = byte(i)
	}
	for _, r := range []book.Record{{Receipt: rc}, {Receipt: rc, Slots: slots("bin"), SlotsTTL: time.Minute}} {
		id := addRecord(t, b, r)
		got, err := b.TakeReceipt(ctx, id, func(b []byte) error {
			if !bytes.Equal(b, rc) {
				t.Errorf("rule: check sees the receipt's bytes exactly: %d bytes", len(b))
			}
			return nil
		})
		if err != nil || !bytes.Equal(got, rc) {
			t.Fatalf("rule: a binary receipt comes back exactly: %d bytes, %v", len(got), err)
		}
	}
}

// Rule: book.TakeReceiptSlots (one of a book.SlotsTaker's calls) takes a
// receipt as TakeReceipt does and hands out the record's slots with it,
// and with ErrSettled or a check's error too; a record without slots has
// none; an unknown id is ErrUnknown without slots.
func testReceiptSlots(t *testing.T, f Factory) {
	b := f(t, book.Config{})
	id := addRecord(t, b, book.Record{Slots: slots("s1"), SlotsTTL: time.Minute, Receipt: []byte("rc")})
	bad := errors.New("too big")
	if _, got, err := book.TakeReceiptSlots(ctx, b, id, func([]byte) error { return bad }); err != bad || got.ID != "slot-s1" {
		t.Fatalf("rule: a failing check's error, the slots, the receipt kept: %+v, %v", got, err)
	}
	rc, got, err := book.TakeReceiptSlots(ctx, b, id, func([]byte) error { return nil })
	if err != nil || string(rc) != "rc" || got.ID != "slot-s1" || len(got.Keys) != 1 || got.Keys[0] != "c:s1" {
		t.Fatalf("rule: the receipt and the record's slots: %q %+v, %v", rc, got, err)
	}
	if _, got, err := book.TakeReceiptSlots(ctx, b, id, nil); !errors.Is(err, book.ErrSettled) || got.ID != "slot-s1" {
		t.Fatalf("rule: settled already: ErrSettled, and the slots still: %+v, %v", got, err)
	}
	plain := addRecord(t, b, book.Record{Receipt: []byte("rc2")})
	if rc, got, err := book.TakeReceiptSlots(ctx, b, plain, nil); err != nil || string(rc) != "rc2" || got.ID != "" {
		t.Fatalf("rule: a record without slots has none: %q %+v, %v", rc, got, err)
	}
	if _, got, err := book.TakeReceiptSlots(ctx, b, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", nil); !errors.Is(err, book.ErrUnknown) || got.ID != "" {
		t.Fatalf("rule: an unknown id: ErrUnknown, no slots: %+v, %v", got, err)
	}
}
