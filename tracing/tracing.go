// Package tracing is the hook through which sluice's surfaces (server,
// envoyrls) and stores report spans without importing a tracing library:
// a Tracer starts spans, a Span takes attributes and events. The command
// (sluice serve --otel) implements it with OpenTelemetry; a program that
// embeds the library can implement it with anything, or leave it nil.
//
// Guarantees: a nil Tracer costs a surface one nil check per request and
// nothing else (no context lookups, no allocations); FromContext on a
// context without a span returns nil, and every helper of this package
// accepts a nil Span. Attribute keys are sluice's (sluice.*); values are
// strings, integers, floats, booleans or string slices, and keys are only
// ever given as the redacted form statuses show.
package tracing

import "context"

// Kind is a span's kind, as OpenTelemetry's SpanKind.
type Kind uint8

const (
	Internal Kind = iota // a step inside sluice
	Server               // a request sluice serves (HTTP, gRPC)
	Client               // a call sluice makes (the store)
)

// Carrier reads the fields of a request that carry a remote trace context
// (traceparent, tracestate: W3C Trace Context). http.Header is one.
type Carrier interface {
	Get(key string) string
}

// Tracer starts spans.
type Tracer interface {
	// Start begins a span named name. Its parent is the span of ctx
	// (FromContext) when there is one, else the remote span that carrier
	// (nil: none) or ctx's WithParent names, else none (a new trace). The
	// context returned carries the span (FromContext returns it).
	Start(ctx context.Context, name string, kind Kind, carrier Carrier) (context.Context, Span)
}

// Span is a span being recorded. Its methods are safe for concurrent use.
type Span interface {
	// Recording reports whether the span is sampled: when false, callers
	// skip building attributes (the span still propagates its trace).
	Recording() bool
	SetAttributes(attrs ...Attr)
	AddEvent(name string, attrs ...Attr)
	// SetError marks the span failed with a message.
	SetError(msg string)
	// IDs are the span's trace and span ids in hex ("" when invalid).
	IDs() (traceID, spanID string)
	End()
}

// Attr is one attribute: Value is a string, int64, float64, bool or
// []string.
type Attr struct {
	Key   string
	Value any
}

func String(k, v string) Attr           { return Attr{k, v} }
func Int(k string, v int64) Attr        { return Attr{k, v} }
func Float(k string, v float64) Attr    { return Attr{k, v} }
func Bool(k string, v bool) Attr        { return Attr{k, v} }
func Strings(k string, v []string) Attr { return Attr{k, v} }

type spanKey struct{}
type parentKey struct{}

// NewContext returns ctx carrying span (Tracer implementations call it).
func NewContext(ctx context.Context, span Span) context.Context {
	return context.WithValue(ctx, spanKey{}, span)
}

// FromContext is the span ctx carries, or nil.
func FromContext(ctx context.Context) Span {
	s, _ := ctx.Value(spanKey{}).(Span)
	return s
}

// Parent is a remote trace context: W3C traceparent and tracestate.
type Parent struct {
	TraceParent, TraceState string
}

// Get makes a Parent a Carrier.
func (p Parent) Get(key string) string {
	switch key {
	case "traceparent":
		return p.TraceParent
	case "tracestate":
		return p.TraceState
	}
	return ""
}

// WithParent returns ctx carrying a remote trace context, for code that
// has a traceparent without a tracing library (gate, httplimit's
// Transport, a program's own handler): a Tracer starting a span in it
// without a carrier makes the span a child of it. A traceparent that is not
// well-formed (TraceParentValid) is not carried.
func WithParent(ctx context.Context, traceParent, traceState string) context.Context {
	if !TraceParentValid(traceParent) {
		return ctx
	}
	return context.WithValue(ctx, parentKey{}, Parent{traceParent, traceState})
}

// ParentFrom is the remote trace context WithParent put in ctx.
func ParentFrom(ctx context.Context) (Parent, bool) {
	p, ok := ctx.Value(parentKey{}).(Parent)
	return p, ok
}

// TraceParentValid reports whether s is a W3C traceparent of version 00
// (or a later version's first four fields): "00-<32 hex>-<16 hex>-<2 hex>",
// lowercase, neither id all zeros.
func TraceParentValid(s string) bool {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	if s[:2] == "ff" || (s[:2] == "00" && len(s) != 55) {
		return false
	}
	for _, f := range [][2]int{{0, 2}, {3, 35}, {36, 52}, {53, 55}} {
		zero := true
		for i := f[0]; i < f[1]; i++ {
			c := s[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
			zero = zero && c == '0'
		}
		if zero && (f[0] == 3 || f[0] == 36) {
			return false
		}
	}
	return true
}
