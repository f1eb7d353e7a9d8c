package gate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/tracing"
)

// A traced gate's admissions are spans under the caller's trace context,
// the wait as an event and a refusal as "refused".
func TestGateTracerSpans(t *testing.T) {
	var rec tracing.Recorder
	g, err := gate.New(gate.Config{Name: "api", Limit: bucket.Limit{Capacity: 1, Rate: 20}, MaxQueue: 4, MaxWait: time.Second, Tracer: &rec})
	if err != nil {
		t.Fatal(err)
	}
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := tracing.WithParent(context.Background(), tp, "")
	for range 2 { // the second waits about 50 ms for its token
		if err := g.Do(ctx, 1, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	spans := rec.Named("sluice.gate.acquire")
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, s := range spans {
		if s.TraceID != tp[3:35] || s.Parent != tp[36:52] || s.Attr("sluice.gate") != "api" || s.Attr("sluice.decision") != "allowed" {
			t.Fatalf("span %+v", s)
		}
	}
	if w := spans[1].Attr("sluice.wait_ms").(int64); w < 20 || len(spans[1].Events) != 1 || spans[1].Events[0].Name != "sluice.wait" {
		t.Fatalf("the second admission's wait: %d ms, events %+v", w, spans[1].Events)
	}
	// Beyond MaxWait: refused, not an error of the span.
	g2, _ := gate.New(gate.Config{Name: "slow", Limit: bucket.Limit{Capacity: 1, Rate: 0.001}, MaxQueue: 4, MaxWait: time.Millisecond, Tracer: &rec})
	g2.Do(ctx, 1, func(context.Context) error { return nil })
	if err := g2.Do(ctx, 1, func(context.Context) error { return nil }); !errors.Is(err, sluice.ErrWaitTooLong) {
		t.Fatalf("want ErrWaitTooLong, got %v", err)
	}
	last := rec.Named("sluice.gate.acquire")[3]
	if last.Attr("sluice.decision") != "refused" || last.Error != "" {
		t.Fatalf("refused span %+v", last)
	}
}
