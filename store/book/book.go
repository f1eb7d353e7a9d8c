// Package book keeps what a rate-limit service must remember between two
// HTTP calls: the answers to requests with a request_id (so that a
// retried request is answered, not charged again) and receipt records (the
// in-flight slots and the receipt of an admitted check, for release and
// settle). Memory keeps them in the process; store/redisstore's NewBook
// keeps them in Redis, so that a retry or a settle may reach any instance
// sharing the store. A service needs no Redis client of its own.
//
// Bounds: request_id answers are kept for a window and at most a number of
// them (the oldest go first); receipts likewise (MaxReceipts, the oldest
// dropped first, counted). A record that holds in-flight slots is never
// dropped before its slots expire: those are bounded by the limits'
// max_in_flight times their keys already.
package book

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Book is where request_id answers and receipt records live. Implementations
// are safe for concurrent use.
type Book interface {
	// Begin claims request id for a request whose fingerprint (what makes
	// two requests the same one) is fp. owner true means the caller
	// decides and must call Finish; else answer is the first request's
	// answer (nil if it failed, or did not finish in time). A claim by a
	// request with another fingerprint is ErrMismatch.
	Begin(ctx context.Context, id, fp string) (answer []byte, owner bool, err error)
	// Finish records the owner's answer to request id (fingerprint fp, as
	// given to Begin); nil forgets id (so that a retry decides anew).
	Finish(ctx context.Context, id, fp string, answer []byte)
	// AddRecord keeps a receipt record and returns its id.
	AddRecord(ctx context.Context, r Record) (string, error)
	// Slots returns a receipt record's in-flight slots: ErrUnknown for an
	// unknown id, or one whose slots and receipt are both gone.
	Slots(ctx context.Context, id string) (store.Slots, error)
	// TakeReceipt returns a record's receipt once: ErrSettled when it was
	// taken already, ErrDropped when the cap dropped it, ErrUnknown for an
	// unknown or expired receipt id. With check, the receipt is taken only when
	// check(receipt) returns nil; its error is returned as is and the
	// receipt stays (a settle refused for bad input changes nothing).
	TakeReceipt(ctx context.Context, id string, check func([]byte) error) ([]byte, error)
	// Dropped counts receipts dropped by the cap so far.
	Dropped() uint64
}

// Record is what an admitted check leaves for later calls.
type Record struct {
	// Slots are the in-flight slots taken (empty when none); the record
	// holds them until SlotsTTL has passed (their expiry), whatever the
	// caps.
	Slots    store.Slots
	SlotsTTL time.Duration
	// Receipt is what the check took (limiter.Receipt, encoded), for
	// settle; empty when nothing can be settled.
	Receipt []byte
}

// Config bounds a Book. Zero values have the documented defaults.
type Config struct {
	// IdempotencyWindow is how long a request_id's answer is kept (default
	// 5 minutes); MaxAnswers caps how many are (default 100,000; the
	// oldest go first; in memory only).
	IdempotencyWindow time.Duration
	MaxAnswers        int
	// ReceiptWindow is how long a receipt is kept for settle (default 10
	// minutes); MaxReceipts caps how many are (default 1,000,000; the
	// oldest dropped first, counted by Dropped).
	ReceiptWindow time.Duration
	MaxReceipts   int
}

// Defaults returns c with its zero fields set to the defaults.
func (c Config) Defaults() Config {
	if c.IdempotencyWindow <= 0 {
		c.IdempotencyWindow = 5 * time.Minute
	}
	if c.MaxAnswers <= 0 {
		c.MaxAnswers = 100_000
	}
	if c.ReceiptWindow <= 0 {
		c.ReceiptWindow = 10 * time.Minute
	}
	if c.MaxReceipts <= 0 {
		c.MaxReceipts = 1_000_000
	}
	return c
}

var (
	// ErrMismatch: a request_id reused by a different request.
	ErrMismatch = errors.New("book: request_id used by a different request")
	// ErrUnknown: no such receipt id (never issued, or past its window).
	ErrUnknown = errors.New("book: unknown receipt id")
	// ErrSettled: the receipt was taken already (or there was none).
	ErrSettled = errors.New("book: receipt settled already")
	// ErrDropped: the receipt was dropped by the cap on receipts.
	ErrDropped = errors.New("book: receipt dropped")
)
