// sluice serve --otel: OpenTelemetry traces of decisions, exported over
// OTLP (gRPC or HTTP) as the standard OTEL_* environment variables say;
// the implementation of the library's tracing hook (package tracing).

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/tracing"
)

// otelFlags are serve's tracing flags.
type otelFlags struct {
	OTel bool `name:"otel" help:"Export OpenTelemetry traces of decisions over OTLP, configured by the standard OTEL_* environment variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). Off: no exporter, no spans."`
}

// otelState is --otel's tracer provider while serve runs.
type otelState struct {
	tp     *sdktrace.TracerProvider
	tracer *otelTracer
}

// startOTel starts the tracer provider when --otel is given (and
// OTEL_SDK_DISABLED is not true), registering
// sluice_otel_export_errors_total and sluice_otel_spans_failed_total on reg.
// Nothing is exported, and nothing is started, without --otel.
func (s *service) startOTel(reg prometheus.Registerer) error {
	if !s.c.OTel {
		return nil
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		s.log.Info("--otel: OTEL_SDK_DISABLED=true, no traces exported")
		return nil
	}
	ctx := context.Background()
	exp, proto, err := otlpExporter(ctx)
	if err != nil {
		return usageError{fmt.Errorf("--otel: %w", err)}
	}
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_otel_export_errors_total",
		Help: "Batches of spans the OTLP exporter failed to send (--otel): the collector unreachable or refusing; decisions are not affected."})
	failed := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_otel_spans_failed_total",
		Help: "Spans in the batches counted by sluice_otel_export_errors_total (lost)."})
	if reg != nil {
		reg.MustRegister(errs, failed)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "sluice"), attribute.String("service.version", versionString())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, over the defaults above
		resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && res == nil {
		return usageError{fmt.Errorf("--otel: resource: %w", err)}
	}
	// The sampler is the SDK's reading of OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on); the batch
	// processor's OTEL_BSP_* variables apply too.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(&countingExporter{SpanExporter: exp, errs: errs, spans: failed}),
		sdktrace.WithResource(res))
	otel.SetErrorHandler(otelErrors(s.log))
	s.otel = &otelState{tp: tp, tracer: &otelTracer{t: tp.Tracer("github.com/sluicehq/sluice")}}
	s.log.Info("--otel: exporting traces", "protocol", proto, "endpoint", otlpEndpoint(proto),
		"sampler", os.Getenv("OTEL_TRACES_SAMPLER"), "sampler_arg", os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	return nil
}

// stopOTel flushes the spans not yet exported (up to 5 s) and stops the
// provider.
func (s *service) stopOTel() {
	if s.otel == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.otel.tp.Shutdown(ctx); err != nil {
		s.log.Warn("--otel: spans not flushed at shutdown", "error", err.Error())
	}
}

// tracer is the tracing hook the surfaces get: nil (untyped) without
// --otel.
func (s *service) tracer() tracing.Tracer {
	if s.otel == nil {
		return nil
	}
	return s.otel.tracer
}

// otlpExporter is the OTLP span exporter OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
// (else OTEL_EXPORTER_OTLP_PROTOCOL; default http/protobuf, the
// specification's) names: grpc or http/protobuf. The exporters read the
// endpoint, headers, timeout and TLS settings from the environment
// themselves.
func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, string, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto == "" {
		proto = "http/protobuf"
	}
	switch proto {
	case "grpc":
		e, err := otlptracegrpc.New(ctx)
		return e, proto, err
	case "http/protobuf":
		e, err := otlptracehttp.New(ctx)
		return e, proto, err
	}
	return nil, "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
}

// otlpEndpoint is the endpoint the environment names, for the start's log
// record.
func otlpEndpoint(proto string) string {
	if e := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); e != "" {
		return e
	}
	if e := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); e != "" {
		return e
	}
	if proto == "grpc" {
		return "localhost:4317 (default)"
	}
	return "localhost:4318 (default)"
}

// countingExporter counts the batches (and their spans) its exporter
// failed to send.
type countingExporter struct {
	sdktrace.SpanExporter
	errs, spans prometheus.Counter
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.errs.Inc()
		e.spans.Add(float64(len(spans)))
	}
	return err
}

// otelErrors logs the SDK's errors (an export that failed, ...) as warn
// records, at most one each 10 s (the others counted in its "suppressed").
func otelErrors(log *slog.Logger) otel.ErrorHandler {
	var last atomic.Int64
	var suppressed atomic.Int64
	return otel.ErrorHandlerFunc(func(err error) {
		now := time.Now().UnixNano()
		if l := last.Load(); now-l < int64(10*time.Second) || !last.CompareAndSwap(l, now) {
			suppressed.Add(1)
			return
		}
		log.Warn("--otel: OpenTelemetry error", "error", err.Error(), "suppressed", suppressed.Swap(0))
	})
}

// otelTracer implements tracing.Tracer with an OpenTelemetry tracer; its
// remote parents are W3C Trace Context (traceparent, tracestate).
type otelTracer struct {
	t trace.Tracer
}

var w3c = propagation.TraceContext{}

var otelKinds = [...]trace.SpanKind{tracing.Internal: trace.SpanKindInternal, tracing.Server: trace.SpanKindServer, tracing.Client: trace.SpanKindClient}

func (o *otelTracer) Start(ctx context.Context, name string, kind tracing.Kind, carrier tracing.Carrier) (context.Context, tracing.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		if carrier != nil {
			ctx = w3c.Extract(ctx, textCarrier{carrier})
		} else if p, ok := tracing.ParentFrom(ctx); ok {
			ctx = w3c.Extract(ctx, textCarrier{p})
		}
	}
	k := trace.SpanKindInternal
	if int(kind) < len(otelKinds) {
		k = otelKinds[kind]
	}
	ctx, sp := o.t.Start(ctx, name, trace.WithSpanKind(k))
	if !sp.IsRecording() {
		// Not sampled: the caller records nothing on it, so no span of
		// ours wraps it (the context still carries OpenTelemetry's, for
		// propagation).
		return ctx, unsampled{}
	}
	s := &otelSpan{sp: sp}
	return tracing.NewContext(ctx, s), s
}

// unsampled is the span of a trace the sampler dropped: it records
// nothing, and its ids are not given (no trace_id in log records).
type unsampled struct{}

func (unsampled) Recording() bool                  { return false }
func (unsampled) SetAttributes(...tracing.Attr)    {}
func (unsampled) AddEvent(string, ...tracing.Attr) {}
func (unsampled) SetError(string)                  {}
func (unsampled) IDs() (string, string)            { return "", "" }
func (unsampled) End()                             {}

// textCarrier reads a tracing.Carrier as OpenTelemetry's TextMapCarrier
// (extraction only).
type textCarrier struct{ c tracing.Carrier }

func (t textCarrier) Get(key string) string {
	if h, ok := t.c.(http.Header); ok { // (without canonicalizing the key each time)
		switch key {
		case "traceparent":
			return first(h["Traceparent"])
		case "tracestate":
			return first(h["Tracestate"])
		}
	}
	return t.c.Get(key)
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
func (t textCarrier) Set(string, string) {}
func (t textCarrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// otelSpan is a tracing.Span of an OpenTelemetry span.
type otelSpan struct{ sp trace.Span }

func (s *otelSpan) Recording() bool { return s.sp.IsRecording() }

func (s *otelSpan) SetAttributes(attrs ...tracing.Attr) { s.sp.SetAttributes(otelAttrs(attrs)...) }

func (s *otelSpan) AddEvent(name string, attrs ...tracing.Attr) {
	s.sp.AddEvent(name, trace.WithAttributes(otelAttrs(attrs)...))
}

func (s *otelSpan) SetError(msg string) { s.sp.SetStatus(otelcodes.Error, msg) }

func (s *otelSpan) IDs() (string, string) {
	sc := s.sp.SpanContext()
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

func (s *otelSpan) End() { s.sp.End() }

// otelAttrs converts attributes; a value of another type is written as
// its %v.
func otelAttrs(attrs []tracing.Attr) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		switch v := a.Value.(type) {
		case string:
			out[i] = attribute.String(a.Key, v)
		case int64:
			out[i] = attribute.Int64(a.Key, v)
		case int:
			out[i] = attribute.Int(a.Key, v)
		case float64:
			out[i] = attribute.Float64(a.Key, v)
		case bool:
			out[i] = attribute.Bool(a.Key, v)
		case []string:
			out[i] = attribute.StringSlice(a.Key, v)
		default:
			out[i] = attribute.String(a.Key, fmt.Sprint(v))
		}
	}
	return out
}
