package book_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/book/booktest"
)

func TestMemoryConformance(t *testing.T) {
	booktest.Run(t, func(t *testing.T, cfg book.Config) book.Book { return book.NewMemory(cfg, nil) })
}

// The user's case: a max_in_flight lease survives 100,000 other admitted
// checks at the default caps, and its receipt too (the default cap is a
// million receipts).
func TestMemoryLeaseSurvivesManyOthers(t *testing.T) {
	b := book.NewMemory(book.Config{}, nil)
	ctx := context.Background()
	id, _ := b.AddRecord(ctx, book.Record{Slots: store.Slots{ID: "l", Keys: []string{"k"}}, SlotsTTL: 30 * time.Second, Receipt: []byte("rc")})
	for range 100_001 {
		b.AddRecord(ctx, book.Record{Receipt: []byte("x")})
	}
	if s, err := b.Slots(ctx, id); err != nil || s.ID != "l" {
		t.Fatalf("slots after 100,001 others: %+v, %v", s, err)
	}
	if rc, err := b.TakeReceipt(ctx, id, nil); err != nil || string(rc) != "rc" {
		t.Fatalf("receipt after 100,001 others: %q, %v", rc, err)
	}
}

// A receipt id from another process (or forged) with a good shape is
// unknown, not "dropped": ids carry a MAC.
func TestMemoryForeignIDIsUnknown(t *testing.T) {
	a, b := book.NewMemory(book.Config{MaxReceipts: 1}, nil), book.NewMemory(book.Config{}, nil)
	ctx := context.Background()
	id, _ := a.AddRecord(ctx, book.Record{Receipt: []byte("rc")})
	a.AddRecord(ctx, book.Record{Receipt: []byte("rc2")}) // drops id's receipt in a
	if _, err := a.TakeReceipt(ctx, id, nil); !errors.Is(err, book.ErrDropped) {
		t.Fatalf("in its own book: %v", err)
	}
	if _, err := b.TakeReceipt(ctx, id, nil); !errors.Is(err, book.ErrUnknown) {
		t.Fatalf("in another book: %v", err)
	}
}
