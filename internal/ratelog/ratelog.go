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

// Message is one repeated log message with its own budget. The zero value
// is not usable: make one with New. It is safe for concurrent use.
type Message struct {
	log        *slog.Logger
	level      slog.Level
	msg        string
	budget     *bucket.Bucket
	suppressed atomic.Int64
}

// New returns msg at level on log (nil: discarded), within the budget.
func New(log *slog.Logger, level slog.Level, msg string) *Message {
	b, _ := bucket.New(bucket.Limit{Capacity: Burst, Rate: Rate})
	return &Message{log: log, level: level, msg: msg, budget: b}
}

// Log writes the record with attrs when the budget allows, with
// "suppressed" (the records held back since the last one written) when
// there were any; else it counts it.
func (m *Message) Log(attrs ...slog.Attr) {
	if m == nil || m.log == nil {
		return
	}
	if d, _ := m.budget.Allow(1); !d.Allowed {
		m.suppressed.Add(1)
		return
	}
	if n := m.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	m.log.LogAttrs(context.Background(), m.level, m.msg, attrs...)
}

// Suppressed returns the records held back since the last one written.
func (m *Message) Suppressed() int64 { return m.suppressed.Load() }
