// Spans of admissions (Config.Tracer): a gate's wait as part of its
// caller's trace.

package gate

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tracing"
)

// Tracer is the gate's Config.Tracer (nil: not traced), for wrappers that
// prepare a trace context only when it is used (httplimit's Transport).
func (g *Gate) Tracer() tracing.Tracer { return g.cfg.Tracer }

// acquire is admit, in a span "sluice.gate.acquire" when the gate has a
// Tracer: a child of ctx's span, else of ctx's remote parent
// (tracing.WithParent: httplimit's Transport puts an outgoing request's
// traceparent there), with sluice.gate (the gate's name), sluice.cost,
// sluice.attempt, sluice.shared, sluice.decision ("allowed", "refused" or
// "cancelled") and sluice.wait_ms (the time admission took), and an event
// "sluice.wait" when it waited.
func (g *Gate) acquire(ctx context.Context, cost int64, attempt int, wantRes bool, ch []int64) (hold, error) {
	t := g.cfg.Tracer
	if t == nil {
		return g.admit(ctx, cost, attempt, wantRes, ch)
	}
	ctx, sp := t.Start(ctx, "sluice.gate.acquire", tracing.Internal, nil)
	began := time.Now()
	h, err := g.admit(ctx, cost, attempt, wantRes, ch)
	if sp.Recording() {
		waited := time.Since(began)
		decision := "allowed"
		switch {
		case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
			decision = "cancelled"
		case err != nil:
			decision = "refused"
		}
		sp.SetAttributes(tracing.String("sluice.gate", g.cfg.Name), tracing.Int("sluice.cost", cost), tracing.Int("sluice.attempt", int64(attempt)),
			tracing.Bool("sluice.shared", g.sh != nil), tracing.String("sluice.decision", decision),
			tracing.Int("sluice.wait_ms", waited.Milliseconds()))
		if waited >= time.Millisecond {
			sp.AddEvent("sluice.wait", tracing.Int("sluice.wait_ms", waited.Milliseconds()))
		}
		if decision == "refused" && !errors.Is(err, sluice.ErrWaitTooLong) && !errors.Is(err, sluice.ErrQueueFull) {
			sp.SetError(err.Error()) // (not a refusal by the budget: a bad cost, a store error)
		}
	}
	sp.End()
	return h, err
}
