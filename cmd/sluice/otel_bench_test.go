// BenchmarkOTelCheck: one /v1/check through the handler in process with
// tracing off, and on (the OpenTelemetry SDK, a sampler of ratio 0.01 or
// 1, spans exported to nowhere), for BENCHMARKS.md's tracing overhead.

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tracing"
)

// discard is a span exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

func BenchmarkOTelCheck(b *testing.B) {
	for _, c := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"off", -1}, {"ratio=0.01", 0.01}, {"ratio=1", 1}} {
		b.Run(c.name, func(b *testing.B) {
			p, err := policy.Parse([]byte("limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 1000000000\n    refill_per_second: 1000000000\n"))
			if err != nil {
				b.Fatal(err)
			}
			var st store.Store = memstore.New()
			var tr tracing.Tracer
			if c.ratio >= 0 {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.ratio))),
					sdktrace.WithBatcher(discard{}))
				defer tp.Shutdown(context.Background())
				ot := &otelTracer{t: tp.Tracer("bench")}
				tr = ot
				mem := st.(memTraced)
				st = &tracedMemStore{tracedStore: &tracedStore{inner: st, t: ot}, mem: mem}
			}
			lim, err := limiter.New(p, st)
			if err != nil {
				b.Fatal(err)
			}
			s, err := server.New(server.Config{Limiter: lim, Tracer: tr})
			if err != nil {
				b.Fatal(err)
			}
			h := s.Handler()
			body := `{"descriptors": {"tenant": "acme"}}`
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
