// Observability: Stats, Events and the logs.

package gate

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// The results of a decision: Event.Result and the logs' "result".
const (
	ResultAdmitted = "admitted"
	ResultRejected = "rejected"
)

// The reasons of a refusal: Event.Reason, the keys of Stats.Rejected and
// the logs' "reason". They are wire values (metric labels, log fields):
// they never change.
const (
	ReasonQueueFull           = "queue_full"            // no place to wait (Config.MaxQueue)
	ReasonWaitTooLong         = "wait_too_long"         // admission would come after the wait allowed
	ReasonCostExceedsCapacity = "cost_exceeds_capacity" // a cost above a budget's capacity
	ReasonInvalidCost         = "invalid_cost"          // a negative cost
	ReasonCanceled            = "canceled"              // the caller's context ended while it waited
	ReasonStoreError          = "store_error"           // a shared gate's store failed (Config.Store)
)

// Event describes one admission decision, for metrics.
type Event struct {
	Limiter         string        // Config.Name
	Result          string        // ResultAdmitted or ResultRejected
	Reason          string        // for rejections: one of the Reason constants
	Retry           bool          // a retried attempt, not an original call
	Attempt         int           // 1 for the original call
	Cost            int64         // token_cost
	Waited          time.Duration // time spent waiting for admission
	Capacity        int64         // bucket_capacity
	RefillPerSecond float64       // refill_per_second
	TokensRemaining float64       // tokens_remaining after the decision
	// Dimensions are the gate's Config.Dimensions after the decision, in
	// their order (nil without dimensions).
	Dimensions []DimensionStats
}

// DimensionStats is one dimension of a gate (Config.Dimensions): its
// capacity and refill and the tokens in its bucket (negative: booked by
// waiters, or a settle's debt).
type DimensionStats struct {
	Name            string
	Capacity        int64
	RefillPerSecond float64
	Tokens          float64
}

func (g *Gate) dimStats() []DimensionStats {
	if len(g.dims) == 0 {
		return nil
	}
	out := make([]DimensionStats, len(g.dims))
	for i, d := range g.dims {
		out[i] = DimensionStats{Name: d.name, Capacity: d.limit.Capacity, RefillPerSecond: d.limit.Rate, Tokens: g.tokens(i + 1)}
	}
	return out
}

// Stats is a snapshot of a gate's counters.
type Stats struct {
	Admitted        uint64 // calls admitted, retries included
	AdmittedRetries uint64 // of which retries
	Retries         uint64 // retries started by Do (after a hinted or retryable error)
	// Rejections by reason.
	RejectedQueueFull   uint64
	RejectedWaitTooLong uint64
	RejectedCost        uint64 // cost above capacity or negative
	Canceled            uint64 // waiters whose context ended
	RejectedStore       uint64 // a shared gate's store failed (Config.Store)
	// Rejected is the same refusals keyed by Event.Reason: every reason
	// but ReasonInvalidCost, counted with ReasonCostExceedsCapacity.
	Rejected    map[string]uint64
	Queued      int       // callers waiting now
	InFlight    int       // calls admitted and not finished now
	PausedUntil time.Time // zero unless a server hint pauses the gate
	Tokens      float64   // tokens in the bucket now (negative: booked by waiters)
	// Dimensions are the gate's Config.Dimensions now, in their order.
	Dimensions []DimensionStats
}

// Stats returns a snapshot of the gate's counters.
func (g *Gate) Stats() Stats {
	c := &g.counters
	s := Stats{
		Admitted: c.admitted.Load(), AdmittedRetries: c.admittedRetries.Load(), Retries: c.retries.Load(),
		RejectedQueueFull: c.queueFull.Load(), RejectedWaitTooLong: c.waitTooLong.Load(),
		RejectedCost: c.badCost.Load(), Canceled: c.canceled.Load(), RejectedStore: c.storeErrors.Load(),
		Queued: int(g.queued.Load()), InFlight: int(g.inFlight.Load()),
	}
	if g.b != nil {
		s.Tokens = g.tokens(0)
	}
	if g.sh != nil {
		s.Queued += int(g.sh.waiting.Load())
	}
	s.Dimensions = g.dimStats()
	s.Rejected = map[string]uint64{
		ReasonQueueFull: s.RejectedQueueFull, ReasonWaitTooLong: s.RejectedWaitTooLong,
		ReasonCostExceedsCapacity: s.RejectedCost, ReasonCanceled: s.Canceled, ReasonStoreError: s.RejectedStore,
	}
	g.mu.Lock()
	if g.pausedUntil.After(g.now()) {
		s.PausedUntil = g.pausedUntil
	}
	g.mu.Unlock()
	return s
}

func joinErrors(err, last error) error {
	return fmt.Errorf("%w (last attempt: %w)", err, last)
}

func (g *Gate) observe(result, reason string, cost int64, attempt int, waited time.Duration) {
	if g.cfg.Observe == nil {
		return
	}
	g.cfg.Observe(Event{
		Limiter: g.name, Result: result, Reason: reason, Retry: attempt > 1, Attempt: attempt,
		Cost: cost, Waited: waited, Capacity: g.limit.Capacity, RefillPerSecond: g.limit.Rate,
		TokensRemaining: g.tokens(0), Dimensions: g.dimStats(),
	})
}

// reject counts a refusal and reports it to Observe and the log.
func (g *Gate) reject(err error, reason string, cost int64, attempt int, waited time.Duration) {
	switch reason {
	case ReasonQueueFull:
		g.counters.queueFull.Add(1)
	case ReasonWaitTooLong:
		g.counters.waitTooLong.Add(1)
	case ReasonCanceled:
		g.counters.canceled.Add(1)
	case ReasonStoreError:
		g.counters.storeErrors.Add(1)
	default: // ReasonCostExceedsCapacity, ReasonInvalidCost
		g.counters.badCost.Add(1)
	}
	g.observe(ResultRejected, reason, cost, attempt, waited)
	if g.cfg.Logger == nil {
		return
	}
	g.mu.Lock()
	g.logLocked(slog.LevelInfo, "rate limit: call refused",
		slog.String("result", ResultRejected), slog.String("reason", reason),
		slog.Int64("bucket_capacity", g.limit.Capacity), slog.Float64("refill_per_second", g.limit.Rate),
		slog.Int64("token_cost", cost), slog.Float64("tokens_remaining", g.tokens(0)),
		slog.Bool("retry", attempt > 1), slog.Int("attempt", attempt), slog.Int64("waited_ms", ceilMS(waited)),
		slog.String("error", err.Error()))
	g.mu.Unlock()
}

// tokens is budget i's tokens (0: Limit, then the dimensions): in process
// the bucket's now; in a shared gate the Remaining after this process's
// last decision.
func (g *Gate) tokens(i int) float64 {
	if g.sh != nil {
		return float64(g.sh.last[i].Load())
	}
	if i == 0 {
		return g.b.Tokens()
	}
	return g.dims[i-1].b.Tokens()
}

// logWarn logs a failure the caller cannot return (a shared gate's store
// writes that follow an admission).
func (g *Gate) logWarn(msg string, err error) {
	if g.cfg.Logger == nil {
		return
	}
	g.mu.Lock()
	g.logLocked(slog.LevelWarn, msg, slog.String("error", err.Error()))
	g.mu.Unlock()
}

// ceilMS is d in whole milliseconds, rounded up (the logs' unit).
func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// logLocked writes a record if the log budget allows; g.mu must be held.
func (g *Gate) logLocked(level slog.Level, msg string, attrs ...slog.Attr) {
	if g.cfg.Logger == nil {
		return
	}
	if d, _ := g.logs.Allow(1); !d.Allowed {
		g.suppressed++
		return
	}
	attrs = append(attrs, slog.String("limiter", g.name))
	if g.suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", g.suppressed))
		g.suppressed = 0
	}
	g.cfg.Logger.LogAttrs(context.Background(), level, msg, attrs...)
}
