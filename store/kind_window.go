// The window kinds (SlidingWindow, FixedWindow): their algorithms over
// window.Limit and their States.

package store

import (
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/window"
)

// A sliding window's State: index, previous and current counts; a fixed
// window's: index and count.
func (st State) sliding() window.SlidingState {
	return window.SlidingState{Index: st[0], Prev: st[1], Curr: st[2]}
}
func slidingState(s window.SlidingState) State { return State{s.Index, s.Prev, s.Curr} }
func (st State) fixed() window.FixedState      { return window.FixedState{Index: st[0], Count: st[1]} }
func fixedState(s window.FixedState) State     { return State{s.Index, s.Count} }

// windowKind is what the sliding and the fixed window share: both are
// converters (N per W is a capacity N at N/W per second).
type windowKind struct{}

func (windowKind) shape(l *Limit) Shape {
	return Shape{Capacity: l.Window.Limit, Window: l.Window.Window, Span: l.Window.Window}
}

func (windowKind) logAttrs(l *Limit, attrs []slog.Attr, cost, remaining int64) []slog.Attr {
	attrs = append(attrs, slog.Int64("window_limit", l.Window.Limit), slog.Int64("window_ms", l.Window.Window.Milliseconds()))
	return costAttrs(attrs, cost, remaining)
}

func (windowKind) capacity(sp *Spec) int64 { return sp.Window.Limit }
func (windowKind) rate(*Spec) float64      { return 0 }
func (windowKind) stateTag(sp *Spec) string {
	return "w" + strconv.FormatInt(int64(sp.Window.Window), 36)
}

func (windowKind) refundBefore(sp *Spec, now int64, _ time.Duration) int64 {
	w := int64(sp.Window.Window)
	return now + w - ((now%w)+w)%w
}

func (windowKind) scaled(sp *Spec, n int64) Spec {
	out := *sp
	out.Window.Limit = max(sp.Window.Limit/n, 1)
	return out
}

func (windowKind) asRate(l *Limit) (int64, float64) {
	return l.Window.Limit, float64(l.Window.Limit) / l.Window.Window.Seconds()
}

func (windowKind) fromRate(l *Limit, capacity int64, rate float64) error {
	l.Window = window.Limit{Limit: capacity, Window: time.Duration(float64(capacity) / rate * 1e9)}
	return l.Window.Validate()
}

func compileWindow(k Kind, l Limit) (*Spec, error) {
	if err := l.Window.Validate(); err != nil {
		return nil, err
	}
	return &Spec{Kind: k, Window: l.Window}, nil
}

type slidingKind struct{ windowKind }

func (slidingKind) compile(l Limit) (*Spec, error) { return compileWindow(SlidingWindow, l) }

func (slidingKind) step(sp *Spec, st State, exists bool, now Now, cost int64) (State, sluice.Decision) {
	s := window.SlidingState{Index: math.MinInt64}
	if exists {
		s = st.sliding()
	}
	s, dec := sp.Window.Sliding(s, now.Wall, cost)
	return slidingState(s), dec
}

func (slidingKind) adjust(sp *Spec, st State, exists bool, now Now, delta int64) (State, sluice.Decision, bool) {
	s := st.sliding()
	if !exists {
		s = window.SlidingState{}
	}
	if idx := floorDiv(now.Wall, int64(sp.Window.Window)); s.Index != idx {
		if delta < 0 {
			return st, sluice.Decision{}, false
		}
		// A later window: count the charge in it (the window math moves
		// the old count to "previous").
		s, _ = sp.Window.Sliding(s, now.Wall, 0)
	}
	s.Curr = capCount(s.Curr, delta, sp.Window.Limit)
	_, dec := sp.Window.Sliding(s, now.Wall, 0)
	return slidingState(s), dec, true
}

type fixedKind struct{ windowKind }

func (fixedKind) compile(l Limit) (*Spec, error) { return compileWindow(FixedWindow, l) }

func (fixedKind) step(sp *Spec, st State, exists bool, now Now, cost int64) (State, sluice.Decision) {
	s := window.FixedState{Index: math.MinInt64}
	if exists {
		s = st.fixed()
	}
	s, dec := sp.Window.Fixed(s, now.Wall, cost)
	return fixedState(s), dec
}

func (fixedKind) adjust(sp *Spec, st State, exists bool, now Now, delta int64) (State, sluice.Decision, bool) {
	s := st.fixed()
	if !exists {
		s = window.FixedState{}
	}
	if idx := floorDiv(now.Wall, int64(sp.Window.Window)); s.Index != idx {
		if delta < 0 {
			return st, sluice.Decision{}, false
		}
		s = window.FixedState{Index: idx}
	}
	s.Count = capCount(s.Count, delta, sp.Window.Limit)
	_, dec := sp.Window.Fixed(s, now.Wall, 0)
	return fixedState(s), dec, true
}

// capCount is a window count n corrected by delta, between 0 and twice the
// window's limit: a charge however large holds at most one limit of debt
// beyond full (as a token bucket's settle debt is at most one capacity),
// and never wraps around to an empty window.
func capCount(n, delta, limit int64) int64 {
	c := 2 * limit // (limit <= 2^61: window.Limit.Validate)
	if delta > 0 && n > c-delta {
		return max(n, c)
	}
	return max(n+delta, 0)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
