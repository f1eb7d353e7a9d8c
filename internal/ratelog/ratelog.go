// Package ratelog rate-limits repeated log records, the way the limiter
// limits its refusal logs: a token bucket of records (a burst of 20, then
// 10 a second) per message, the records it holds back counted and reported
// in the next record written as its "suppressed" field.
package ratelog

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/sluicehq/sluice/bucket"
)

// Burst and Rate are the budget of one Message: at most Burst records at
// once, then Rate a second (the limiter's refusal-log budget).
const (
	Burst = 20
	Rate  = 10
)

// Budget is a log budget shared by the records written through it (the
// limiter's refusal logs share one): at most Burst records at once, then
// Rate a second. The zero value is not usable: make one with NewBudget. It
// is safe for concurrent use.
type Budget struct {
	bucket     *bucket.Bucket
	suppressed atomic.Int64
}

// NewBudget returns a budget of Burst records, then Rate a second.
func NewBudget() *Budget {
	b, _ := bucket.New(bucket.Limit{Capacity: Burst, Rate: Rate})
	return &Budget{bucket: b}
}

// Log writes msg with attrs at level on log (nil: discarded) when the
// budget allows, with "suppressed" (the records held back since the last
// one written) when there were any; else it counts it.
func (b *Budget) Log(log *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	if b == nil || log == nil {
		return
	}
	if d, _ := b.bucket.Allow(1); !d.Allowed {
		b.suppressed.Add(1)
		return
	}
	if n := b.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	log.LogAttrs(context.Background(), level, msg, attrs...)
}

// Message is one repeated log message with its own budget. The zero value
// is not usable: make one with New. It is safe for concurrent use.
type Message struct {
	log    *slog.Logger
	level  slog.Level
	msg    string
	budget *Budget
}

// New returns msg at level on log (nil: discarded), within a budget of its
// own.
func New(log *slog.Logger, level slog.Level, msg string) *Message {
	return &Message{log: log, level: level, msg: msg, budget: NewBudget()}
}

// Log writes the record with attrs when the message's budget allows (see
// Budget.Log).
func (m *Message) Log(attrs ...slog.Attr) {
	if m == nil {
		return
	}
	m.budget.Log(m.log, m.level, m.msg, attrs...)
}

// Suppressed returns the records held back since the last one written.
func (m *Message) Suppressed() int64 { return m.budget.suppressed.Load() }
