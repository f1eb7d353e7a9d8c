package tracing_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/tracing"
)

func TestTraceParentValid(t *testing.T) {
	for s, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":       true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": true,  // a later version's extra fields
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": false, // version 00 has none
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":       false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":          false,
		"": false,
	} {
		if got := tracing.TraceParentValid(s); got != want {
			t.Errorf("TraceParentValid(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestRecorderParents(t *testing.T) {
	var r tracing.Recorder
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := http.Header{}
	h.Set("traceparent", tp)
	ctx, root := r.Start(context.Background(), "root", tracing.Server, h)
	_, child := r.Start(ctx, "child", tracing.Client, nil)
	child.End()
	root.End()
	_, viaCtx := r.Start(tracing.WithParent(context.Background(), tp, ""), "ctx", tracing.Internal, nil)
	viaCtx.End()
	if tracing.WithParent(context.Background(), "bad", "") != context.Background() {
		t.Fatal("a malformed traceparent was carried")
	}
	s := r.Spans()
	if len(s) != 3 || s[1].TraceID != tp[3:35] || s[1].Parent != tp[36:52] || !s[1].Remote {
		t.Fatalf("root: %+v", s)
	}
	if s[0].TraceID != s[1].TraceID || s[0].Parent != s[1].SpanID || s[0].Remote {
		t.Fatalf("child: %+v", s[0])
	}
	if s[2].Parent != tp[36:52] {
		t.Fatalf("WithParent's: %+v", s[2])
	}
	if tracing.FromContext(context.Background()) != nil || tracing.FromContext(ctx) != root {
		t.Fatal("FromContext")
	}
}
