// Recorder: a Tracer that keeps its finished spans in memory, for tests
// and for programs that inspect their own spans.

package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// Recorder is a Tracer keeping every span in memory once it ends, each
// sampled. Its ids are random; a span's parent is ctx's span (a *Recorded
// of this Recorder or any Span with IDs), else the remote traceparent of
// the carrier or of WithParent.
type Recorder struct {
	mu    sync.Mutex
	ended []*Recorded
}

// Recorded is a span of a Recorder.
type Recorded struct {
	Name                    string
	Kind                    Kind
	TraceID, SpanID, Parent string
	// Remote is true when the parent came from a traceparent.
	Remote bool
	r      *Recorder
	mu     sync.Mutex
	Attrs  map[string]any
	Events []Event
	Error  string
	done   bool
}

// Event is an event of a Recorded span.
type Event struct {
	Name  string
	Attrs map[string]any
}

// Start implements Tracer.
func (r *Recorder) Start(ctx context.Context, name string, kind Kind, carrier Carrier) (context.Context, Span) {
	s := &Recorded{Name: name, Kind: kind, SpanID: randHex(8), r: r, Attrs: map[string]any{}}
	if p := FromContext(ctx); p != nil {
		s.TraceID, s.Parent = p.IDs()
	}
	if s.TraceID == "" {
		var tp string
		if carrier != nil {
			tp = carrier.Get("traceparent")
		} else if p, ok := ParentFrom(ctx); ok {
			tp = p.TraceParent
		}
		if TraceParentValid(tp) {
			s.TraceID, s.Parent, s.Remote = tp[3:35], tp[36:52], true
		} else {
			s.TraceID = randHex(16)
		}
	}
	return NewContext(ctx, s), s
}

// Spans returns the spans ended so far, in the order they ended.
func (r *Recorder) Spans() []*Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Recorded(nil), r.ended...)
}

// Named returns the ended spans named name.
func (r *Recorder) Named(name string) []*Recorded {
	var out []*Recorded
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (s *Recorded) Recording() bool { return true }

func (s *Recorded) SetAttributes(attrs ...Attr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range attrs {
		s.Attrs[a.Key] = a.Value
	}
}

func (s *Recorded) AddEvent(name string, attrs ...Attr) {
	e := Event{Name: name, Attrs: map[string]any{}}
	for _, a := range attrs {
		e.Attrs[a.Key] = a.Value
	}
	s.mu.Lock()
	s.Events = append(s.Events, e)
	s.mu.Unlock()
}

func (s *Recorded) SetError(msg string) {
	s.mu.Lock()
	s.Error = msg
	s.mu.Unlock()
}

func (s *Recorded) IDs() (string, string) { return s.TraceID, s.SpanID }

// Attr returns an attribute's value (nil when not set).
func (s *Recorded) Attr(key string) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Attrs[key]
}

// End records the span (once).
func (s *Recorded) End() {
	s.mu.Lock()
	done := s.done
	s.done = true
	s.mu.Unlock()
	if done {
		return
	}
	s.r.mu.Lock()
	s.r.ended = append(s.r.ended, s)
	s.r.mu.Unlock()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
