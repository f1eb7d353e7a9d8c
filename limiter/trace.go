// What a check tells the span of its context (tracing.FromContext): the
// booked wait as an event, and the trace ids its log records carry.

package limiter

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/tracing"
)

// traceWait adds the event "sluice.wait" (sluice.wait_ms, sluice.reserve)
// to ctx's span, if any: a booked request's wait for its turn.
func traceWait(ctx context.Context, wait time.Duration, reserve bool) {
	if sp := tracing.FromContext(ctx); sp != nil && sp.Recording() {
		sp.AddEvent("sluice.wait", tracing.Int("sluice.wait_ms", CeilMS(wait)), tracing.Bool("sluice.reserve", reserve))
	}
}

// traceIDs appends trace_id and span_id of ctx's span (when there is one)
// to a log record's attributes.
func traceIDs(ctx context.Context, attrs []slog.Attr) []slog.Attr {
	if ctx == nil {
		return attrs
	}
	if sp := tracing.FromContext(ctx); sp != nil {
		if t, s := sp.IDs(); t != "" {
			attrs = append(attrs, slog.String("trace_id", t), slog.String("span_id", s))
		}
	}
	return attrs
}
