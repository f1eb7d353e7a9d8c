// The gRPC modes' envoy_settle bookings: where they live and how long.

package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/redisstore"
)

// settleBook is the book of the gRPC modes' envoy_settle bookings
// (envoyrls' SetSettleBook, policy and Envoy-config modes): in Redis when the store is
// shared (every instance sees a booking, so the stream-done call may reach
// another one than the request path; kept in process while Redis is
// unreachable, as the HTTP service's book), else in process. A booking is
// kept for --lease-window, and at most --max-receipts of them. A call
// whose id the book cannot claim (Redis refusing writes, as at maxmemory)
// is decided as one without envoy_settle (envoyrls), and logged.
func (s *service) settleBook(shared sharedStore) book.Book {
	cfg := book.Config{IdempotencyWindow: s.c.ReceiptWindow, ReceiptWindow: s.c.ReceiptWindow, MaxReceipts: s.c.MaxReceipts, MaxAnswers: s.c.MaxReceipts}
	if shared.redis != nil {
		return &unbookedLog{Book: failover.NewBook(shared.failover, redisstore.NewBook(shared.redis, cfg), cfg), log: s.log}
	}
	return book.NewMemory(cfg, nil)
}

// unbookedEvery is how often at most unbookedLog writes a record.
const unbookedEvery = 10 * time.Second

// unbookedLog is a settle book that logs the claims it cannot make (each
// such call is decided as one without envoy_settle): a warning
// "envoy_settle: booking not kept" with the error and the calls since the
// last record, at most one per unbookedEvery.
type unbookedLog struct {
	book.Book
	log   *slog.Logger
	mu    sync.Mutex
	last  time.Time
	calls int
}

// Begin implements book.Book.
func (b *unbookedLog) Begin(ctx context.Context, id, fp string) ([]byte, bool, error) {
	ans, owner, err := b.Book.Begin(ctx, id, fp)
	if err != nil && ctx.Err() == nil && b.log != nil {
		b.mu.Lock()
		b.calls++
		now := time.Now()
		write := now.Sub(b.last) >= unbookedEvery
		calls := b.calls
		if write {
			b.last, b.calls = now, 0
		}
		b.mu.Unlock()
		if write {
			b.log.Warn("envoy_settle: booking not kept, calls decided as without envoy_settle", "error", err.Error(), "calls", calls)
		}
	}
	return ans, owner, err
}
