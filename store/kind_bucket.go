// The token bucket kind (TokenBucket): its algorithm over bucket.Params, its
// State, booking, pauses and ceilings.

package store

import (
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// A token bucket's State: TAT, origin and phase (bucket.Params' units).
func (st State) tat() (tat, origin int64, phase uint64) { return st[0], st[1], uint64(st[2]) }
func bucketState(tat, origin int64, phase uint64) State { return State{tat, origin, int64(phase)} }

// BucketState brings a keyed token bucket's state (tat, origin, phase) to
// time d (ns in the store's time base): a new or full bucket restarts at
// origin d (a full bucket equals a new one), and a state that has run past
// MaxElapsed is rebased exactly. A time before the origin (a stale reading)
// counts as the origin. Every store applies it, so they decide alike.
func BucketState(p *bucket.Params, tat, origin int64, phase uint64, exists bool, d int64) (int64, int64, uint64) {
	if !exists {
		return 0, d, 0
	}
	if d < origin {
		d = origin
	}
	for d-origin > p.MaxElapsed() {
		nt, applied, ph := p.Rebase(tat, bucket.Instant{Elapsed: d - origin, Phase: phase})
		tat, origin, phase = nt, origin+applied, ph
	}
	if tat <= p.Units(bucket.Instant{Elapsed: d - origin, Phase: phase}) {
		return 0, d, 0 // full: the same as new
	}
	return tat, origin, phase
}

// NewBucketSpec compiles a token-bucket spec, with the representation of
// bucket.CompileSmall (numbers a shared store's script can decide on plain
// doubles, wherever the limit allows).
func NewBucketSpec(l bucket.Limit) (*Spec, error) {
	p, err := bucket.CompileSmall(l)
	if err != nil {
		return nil, err
	}
	return &Spec{Kind: TokenBucket, Bucket: p}, nil
}

// bucketKind is TokenBucket: pauser, booker and converter.
type bucketKind struct{}

func (bucketKind) shape(l *Limit) Shape {
	return Shape{Capacity: l.Bucket.Capacity, Rate: l.Bucket.Rate}
}

func (bucketKind) logAttrs(l *Limit, attrs []slog.Attr, cost, remaining int64) []slog.Attr {
	attrs = append(attrs, slog.Int64("bucket_capacity", l.Bucket.Capacity), slog.Float64("refill_per_second", l.Bucket.Rate))
	return costAttrs(attrs, cost, remaining)
}

func (bucketKind) compile(l Limit) (*Spec, error) { return NewBucketSpec(l.Bucket) }
func (bucketKind) capacity(sp *Spec) int64        { return sp.Bucket.Limit().Capacity }
func (bucketKind) rate(sp *Spec) float64          { return sp.Bucket.Limit().Rate }
func (bucketKind) stateTag(sp *Spec) string       { return "u" + strconv.FormatInt(sp.Bucket.Unit(), 36) }

func (bucketKind) step(sp *Spec, st State, exists bool, now Now, cost int64) (State, sluice.Decision) {
	return stepBucket(sp, st, exists, now, cost)
}

func stepBucket(sp *Spec, st State, exists bool, now Now, cost int64) (State, sluice.Decision) {
	t, o, ph := st.tat()
	tat, origin, phase := BucketState(&sp.Bucket, t, o, ph, exists, now.Mono)
	nt, dec := sp.Bucket.Step(tat, bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}, cost)
	return bucketState(nt, origin, phase), dec
}

func (bucketKind) adjust(sp *Spec, st State, exists bool, now Now, delta int64) (State, sluice.Decision, bool) {
	p := &sp.Bucket
	t, o, ph := st.tat()
	tat, origin, phase := BucketState(p, t, o, ph, exists, now.Mono)
	at := bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}
	if delta < 0 {
		tat = p.Refund(tat, -delta)
	} else {
		tat = p.Charge(tat, at, delta)
	}
	_, dec := p.Step(tat, at, 0)
	return bucketState(tat, origin, phase), dec, true
}

func (bucketKind) book(sp *Spec, st State, exists bool, now Now, cost int64, maxWait time.Duration) (State, sluice.Decision, time.Duration, bool) {
	p := &sp.Bucket
	t, o, ph := st.tat()
	tat, origin, phase := BucketState(p, t, o, ph, exists, now.Mono)
	at := bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}
	nt, w, ok := p.Reserve(tat, at, cost, maxWait)
	if !ok {
		return st, sluice.Decision{}, 0, false
	}
	_, dec := p.Step(nt, at, 0)
	dec.Allowed = true // (a peek of a state in debt says not allowed)
	dec.RetryAfter = 0
	return bucketState(nt, origin, phase), dec, w, true
}

func (bucketKind) pause(sp *Spec, st State, exists bool, now Now, d time.Duration) (State, sluice.Decision) {
	return bucketOp(sp, st, exists, now, func(p *bucket.Params, tat int64, at bucket.Instant) int64 { return p.Pause(tat, at, d) })
}

func (bucketKind) lower(sp *Spec, st State, exists bool, now Now, n int64) (State, sluice.Decision) {
	return bucketOp(sp, st, exists, now, func(p *bucket.Params, tat int64, at bucket.Instant) int64 { return p.Lower(tat, at, n) })
}

// bucketOp applies op, a transition of bucket.Params, to a token bucket's
// state at now (a new or full state restarting at now, as every store
// does), and peeks the result.
func bucketOp(sp *Spec, st State, exists bool, now Now, op func(p *bucket.Params, tat int64, at bucket.Instant) int64) (State, sluice.Decision) {
	p := &sp.Bucket
	t, o, ph := st.tat()
	tat, origin, phase := BucketState(p, t, o, ph, exists, now.Mono)
	at := bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}
	tat = op(p, tat, at)
	_, dec := p.Step(tat, at, 0)
	return bucketState(tat, origin, phase), dec
}

func (bucketKind) refundBefore(_ *Spec, now int64, reset time.Duration) int64 {
	if int64(reset) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(reset)
}

func (bucketKind) scaled(sp *Spec, n int64) Spec {
	out := *sp
	l := sp.Bucket.Limit()
	l.Capacity = max(l.Capacity/n, 1)
	l.Rate /= float64(n)
	if p, err := bucket.Compile(l); err == nil {
		out.Bucket = p
	}
	return out
}

func (bucketKind) asRate(l *Limit) (int64, float64) { return l.Bucket.Capacity, l.Bucket.Rate }

func (bucketKind) fromRate(l *Limit, capacity int64, rate float64) error {
	l.Bucket.Capacity, l.Bucket.Rate = capacity, rate
	return nil
}

// Direct reports whether an item of kind k may be decided by a fast path
// that steps its bucket.Params directly, without the kind table (only the
// token bucket: its state is the bucket's own).
func (k Kind) Direct() bool { return k == TokenBucket }
