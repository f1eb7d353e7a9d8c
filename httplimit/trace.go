// The Transport and the caller's trace: an outgoing request's traceparent
// becomes the parent of its gate's admission span.

package httplimit

import (
	"net/http"

	"github.com/sluicehq/sluice/tracing"
)

// withTraceParent returns req with its own traceparent (and tracestate)
// header in its context as the remote parent (tracing.WithParent) when the
// gate traces (gate.Config.Tracer), the request carries a well-formed
// traceparent and its context holds neither a span nor a parent: the
// gate's "sluice.gate.acquire" span then joins the trace the request
// belongs to, even when the caller's tracing library set the header
// without putting its span where the gate can see it. The request itself
// is sent unchanged: its headers, traceparent included, go on to the base
// transport as they came (every retry too).
func (t *transport) withTraceParent(req *http.Request) *http.Request {
	if t.g.Tracer() == nil {
		return req
	}
	tp := req.Header.Get("traceparent")
	if tp == "" || !tracing.TraceParentValid(tp) {
		return req
	}
	ctx := req.Context()
	if tracing.FromContext(ctx) != nil {
		return req
	}
	if _, ok := tracing.ParentFrom(ctx); ok {
		return req
	}
	return req.WithContext(tracing.WithParent(ctx, tp, req.Header.Get("tracestate")))
}
