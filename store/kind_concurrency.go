// The concurrency kind (Concurrency): in-flight slots, which the stores
// keep themselves (this algorithm only describes and compiles them).

package store

import (
	"log/slog"
	"time"

	"github.com/sluicehq/sluice"
)

// concKind is Concurrency (its row in kinds holds slots).
type concKind struct{}

func (concKind) shape(l *Limit) Shape {
	return Shape{Capacity: l.MaxInFlight, SlotTTL: l.SlotTTL, Span: l.SlotTTL}
}

func (concKind) logAttrs(l *Limit, attrs []slog.Attr, _, remaining int64) []slog.Attr {
	return append(attrs, slog.Int64("max_in_flight", l.MaxInFlight), slog.Int64("in_flight", l.MaxInFlight-remaining))
}

func (concKind) compile(l Limit) (*Spec, error) {
	if l.MaxInFlight < 1 {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "max_in_flight %d must be at least 1", l.MaxInFlight)
	}
	if l.SlotTTL <= 0 {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "lease_ttl %v must be positive", l.SlotTTL)
	}
	return &Spec{Kind: Concurrency, MaxInFlight: l.MaxInFlight, SlotTTL: l.SlotTTL}, nil
}
func (concKind) capacity(sp *Spec) int64 { return sp.MaxInFlight }
func (concKind) rate(*Spec) float64      { return 0 }
func (concKind) stateTag(*Spec) string   { return "" }
func (concKind) step(*Spec, State, bool, Now, int64) (State, sluice.Decision) {
	panic("store: Step on a Concurrency spec (its slots are the store's own)")
}
func (concKind) adjust(*Spec, State, bool, Now, int64) (State, sluice.Decision, bool) {
	return State{}, sluice.Decision{}, false // in-flight slots are not adjusted
}
func (concKind) refundBefore(*Spec, int64, time.Duration) int64 { return 0 }
func (concKind) scaled(sp *Spec, n int64) Spec {
	out := *sp
	out.MaxInFlight = max(sp.MaxInFlight/n, 1)
	return out
}
