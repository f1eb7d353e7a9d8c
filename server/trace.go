// Spans of the HTTP service (Config.Tracer): one per /v1/check, /v1/settle
// and /v1/auth request, with the decision's attributes.

package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/tracing"
)

// traced wraps h in a span named name ("<METHOD> <path>", a child of the
// request's traceparent) when the server has a Tracer; without one it is
// h itself. A span the sampler drops ends at once, and the request is
// served as without a Tracer (its refusal's log record then has no
// trace_id).
func (s *Server) traced(name string, h http.HandlerFunc) http.HandlerFunc {
	t := s.cfg.Tracer
	if t == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, sp := t.Start(r.Context(), name, tracing.Server, r.Header)
		if !sp.Recording() {
			// Not sampled: nothing to record here or below (the store's
			// spans would not be sampled either), so the request goes on
			// as it came, without the span's context.
			sp.End()
			h(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r.WithContext(ctx))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		sp.SetAttributes(tracing.String("http.request.method", r.Method), tracing.String("url.path", r.URL.Path),
			tracing.Int("http.response.status_code", int64(status)))
		if status >= 500 {
			sp.SetError(strconv.Itoa(status))
		}
		sp.End()
	}
}

// statusWriter keeps the status a handler writes.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes a flush on (the waiting answers of /v1/check do not need
// it, but a handler may).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// traceDecision writes a decision's attributes on the span of ctx (when
// the server traces and the span is sampled): decisionAttrs.
func (s *Server) traceDecision(ctx context.Context, req limiter.Request, res limiter.Result, err error) {
	if s.cfg.Tracer == nil {
		return
	}
	sp := tracing.FromContext(ctx)
	if sp == nil || !sp.Recording() {
		return
	}
	sp.SetAttributes(decisionAttrs(req, res, err)...)
	if err != nil {
		sp.SetError(err.Error())
	}
}

// decisionAttrs are the attributes of a decision (the Envoy service writes
// the same): sluice.decision ("allowed", "refused", "denied" or "error"
// with sluice.error_code), sluice.limits (the applicable limits' names, in
// policy order), sluice.keys (their keys as statuses show them: redacted
// descriptors as a hash), sluice.refused_by (the limits that refused),
// sluice.shadow (a shadow limit would have refused), sluice.override (the
// limits an override decided), sluice.priority (the request's priority
// class, when it has one), sluice.cost, sluice.retry_after_ms when
// refused, sluice.wait_ms for a reserve, sluice.max_wait_ms when the
// request could wait.
func decisionAttrs(req limiter.Request, res limiter.Result, err error) []tracing.Attr {
	if err != nil {
		return []tracing.Attr{tracing.String("sluice.decision", "error"), tracing.String("sluice.error_code", string(answer.Classify(err).Code))}
	}
	decision := "allowed"
	switch {
	case res.DeniedBy() != "":
		decision = "denied"
	case !res.Allowed:
		decision = "refused"
	}
	names := make([]string, len(res.Limits))
	keys := make([]string, len(res.Limits))
	var refusedBy, overridden []string
	shadow := false
	for i, st := range res.Limits {
		names[i], keys[i] = st.Name, st.Key
		if !st.Allowed && !st.ShadowRefused {
			refusedBy = append(refusedBy, st.Name)
		}
		shadow = shadow || st.ShadowRefused
		if st.Override != nil {
			overridden = append(overridden, st.Name)
		}
	}
	attrs := []tracing.Attr{tracing.String("sluice.decision", decision), tracing.Strings("sluice.limits", names),
		tracing.Strings("sluice.keys", keys), tracing.Bool("sluice.shadow", shadow), tracing.Int("sluice.cost", res.Cost)}
	if len(refusedBy) > 0 {
		attrs = append(attrs, tracing.Strings("sluice.refused_by", refusedBy))
	}
	if len(overridden) > 0 {
		attrs = append(attrs, tracing.Strings("sluice.override", overridden))
	}
	if res.Priority != "" {
		attrs = append(attrs, tracing.String("sluice.priority", res.Priority))
	}
	if !res.Allowed {
		attrs = append(attrs, tracing.Int("sluice.retry_after_ms", limiter.CeilMS(res.RetryAfter)))
	}
	if req.Reserve && res.Allowed {
		attrs = append(attrs, tracing.Int("sluice.wait_ms", limiter.CeilMS(res.Wait)))
	}
	if req.MaxWait > 0 {
		attrs = append(attrs, tracing.Int("sluice.max_wait_ms", limiter.CeilMS(req.MaxWait)))
	}
	return attrs
}
