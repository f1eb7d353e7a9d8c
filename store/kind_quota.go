// The calendar quota kind (Quota): its algorithm over quota.Limit and its
// State.

package store

import (
	"hash/fnv"
	"log/slog"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/quota"
)

// A quota's State: period start and used cost.
func (st State) quota() quota.State  { return quota.State{Start: st[0], Used: st[1]} }
func quotaState(s quota.State) State { return State{s.Start, s.Used} }

// quotaKind is Quota.
type quotaKind struct{}

func (quotaKind) shape(l *Limit) Shape {
	return Shape{Capacity: l.Quota.Limit, Period: l.Quota.Period.String(), Timezone: l.Quota.Zone(), Span: l.Quota.Period.Nominal()}
}

func (quotaKind) logAttrs(l *Limit, attrs []slog.Attr, cost, remaining int64) []slog.Attr {
	attrs = append(attrs, slog.Int64("quota_limit", l.Quota.Limit), slog.String("period", l.Quota.Period.String()), slog.String("timezone", l.Quota.Zone()))
	return costAttrs(attrs, cost, remaining)
}

func (quotaKind) compile(l Limit) (*Spec, error) {
	if err := l.Quota.Validate(); err != nil {
		return nil, err
	}
	q := l.Quota
	if q.Location == nil {
		q.Location = time.UTC
	}
	return &Spec{Kind: Quota, Quota: q}, nil
}
func (quotaKind) capacity(sp *Spec) int64 { return sp.Quota.Limit }
func (quotaKind) rate(*Spec) float64      { return 0 }

// stateTag names the period and the zone (its name hashed: zone names hold
// characters keys need not).
func (quotaKind) stateTag(sp *Spec) string {
	h := fnv.New32a()
	h.Write([]byte(sp.Quota.Zone()))
	return "q" + sp.Quota.Period.String()[:1] + strconv.FormatUint(uint64(h.Sum32()), 36)
}

func (quotaKind) step(sp *Spec, st State, exists bool, now Now, cost int64) (State, sluice.Decision) {
	s := quota.New
	if exists {
		s = st.quota()
	}
	s, dec := sp.Quota.Step(s, now.Wall, cost)
	return quotaState(s), dec
}

func (quotaKind) adjust(sp *Spec, st State, exists bool, now Now, delta int64) (State, sluice.Decision, bool) {
	s := quota.New
	if exists {
		s = st.quota()
	} else if delta < 0 {
		return st, sluice.Decision{}, false
	}
	s, ok := sp.Quota.Adjust(s, now.Wall, delta)
	if !ok {
		return st, sluice.Decision{}, false
	}
	_, dec := sp.Quota.Step(s, now.Wall, 0)
	return quotaState(s), dec, true
}

func (quotaKind) refundBefore(sp *Spec, now int64, _ time.Duration) int64 {
	_, end := sp.Quota.Bounds(now)
	return end
}

func (quotaKind) scaled(sp *Spec, n int64) Spec {
	out := *sp
	out.Quota.Limit = max(sp.Quota.Limit/n, 1)
	return out
}
