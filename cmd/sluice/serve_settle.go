// The gRPC modes' envoy_settle bookings: where they live and how long.

package main

import (
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/redisstore"
)

// settleBook is the book of the gRPC modes' envoy_settle bookings
// (envoyrls' SetSettleBook, policy and Envoy-config modes): in Redis when the store is
// shared (every instance sees a booking, so the stream-done call may reach
// another one than the request path; kept in process while Redis is
// unreachable, as the HTTP service's book), else in process. A booking is
// kept for --lease-window, and at most --max-receipts of them.
func (s *service) settleBook(shared sharedStore) book.Book {
	cfg := book.Config{IdempotencyWindow: s.c.ReceiptWindow, ReceiptWindow: s.c.ReceiptWindow, MaxReceipts: s.c.MaxReceipts, MaxAnswers: s.c.MaxReceipts}
	if shared.redis != nil {
		return failover.NewBook(shared.failover, redisstore.NewBook(shared.redis, cfg), cfg)
	}
	return book.NewMemory(cfg, nil)
}
