// Kind and the kind table: what a Go store must know of each kind of limit.

package store

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/window"
)

// Kind is what a limit counts. It is the one kind type of sluice: the
// policy, the limiter, every store, the simulator and the servers name
// kinds by it. What a Go store must know about a kind is in this file (the
// Spec methods below dispatch on it); the Redis store mirrors each kind in
// its script (store/redisstore: kindLetter and the spec's arguments in
// codec.go, the transitions in kinds.lua).
type Kind uint8

const (
	// TokenBucket: Spec.Bucket.
	TokenBucket Kind = iota
	// SlidingWindow: Spec.Window.
	SlidingWindow
	// Concurrency: Spec.MaxInFlight leases held at once, each expiring
	// after Spec.LeaseTTL unless released.
	Concurrency
	// FixedWindow: Spec.Window, reset at each boundary (a baseline).
	FixedWindow
	// Quota: Spec.Quota, a calendar quota reset at each period's start.
	Quota

	numKinds
)

// kinds holds each kind's definition, indexed by Kind. Adding a kind here
// is a constant above, an entry in kinds and in kindOrder, its fields in
// Limit and Spec (and the Limit.Capacity case), and its algorithm type
// below; then policy's table (policy/kinds.go) and the Redis mirror
// (store/redisstore: kindLetter, the spec's arguments, kinds.lua). The
// store's tests check that kinds, kindOrder and ParseKind agree.
var kinds = [numKinds]struct {
	name string
	alg  algorithm
}{
	TokenBucket:   {"token_bucket", bucketKind{}},
	SlidingWindow: {"sliding_window", slidingKind{}},
	FixedWindow:   {"fixed_window", fixedKind{}},
	Concurrency:   {"concurrency", concKind{}},
	Quota:         {"quota", quotaKind{}},
}

// kindOrder is the order in which kinds are listed to people.
var kindOrder = []Kind{TokenBucket, SlidingWindow, FixedWindow, Concurrency, Quota}

// String returns the kind's algorithm name ("token_bucket",
// "sliding_window", "fixed_window", "concurrency", "quota"), which
// ParseKind parses back; "unknown" for a value that is no Kind constant.
func (k Kind) String() string {
	if k < numKinds {
		return kinds[k].name
	}
	return "unknown"
}

// Kinds returns every kind, in the order they are listed to people
// (token_bucket, sliding_window, fixed_window, concurrency, quota).
func Kinds() []Kind { return append([]Kind(nil), kindOrder...) }

// ParseKind returns the Kind whose String is s. ParseKind(k.String()) is k
// for every Kind constant; any other s is an error naming it and the
// kinds.
func ParseKind(s string) (Kind, error) {
	names := make([]string, len(kindOrder))
	for i, k := range kindOrder {
		if k.String() == s {
			return k, nil
		}
		names[i] = k.String()
	}
	return 0, fmt.Errorf("unknown algorithm %q (want %s or %s)", s, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// Limit is a limit as written, before compilation: its kind and the fields
// of that kind (the others are ignored).
type Limit struct {
	Kind        Kind
	Bucket      bucket.Limit  // TokenBucket
	Window      window.Limit  // SlidingWindow, FixedWindow
	MaxInFlight int64         // Concurrency
	LeaseTTL    time.Duration // Concurrency
	Quota       quota.Limit   // Quota
}

// Capacity is the largest cost one request can have under l (a
// concurrency limit's max_in_flight).
func (l *Limit) Capacity() int64 {
	switch l.Kind {
	case TokenBucket:
		return l.Bucket.Capacity
	case SlidingWindow, FixedWindow:
		return l.Window.Limit
	case Quota:
		return l.Quota.Limit
	}
	return l.MaxInFlight
}

// NewSpec validates and compiles l; the error matches
// sluice.ErrInvalidLimit when l is unusable.
func NewSpec(l Limit) (*Spec, error) {
	if l.Kind >= numKinds {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "unknown kind %d", l.Kind)
	}
	return kinds[l.Kind].alg.compile(l)
}

// Now is a decision's time as a store reads it: Mono is ns on the store's
// own time base (token buckets count from it), Wall is Unix ns (windows
// and quotas align to the calendar).
type Now struct{ Mono, Wall int64 }

// State is a key's state as a Go store holds it, three integers whose
// meaning is the kind's (named by the accessors below): a token bucket's
// TAT, origin and phase (bucket.Params' units); a sliding window's index,
// previous and current counts; a fixed window's index and count; a
// quota's period start and used cost. Concurrency limits have none (their
// slots are the store's own).
type State [3]int64

func (st State) tat() (tat, origin int64, phase uint64) { return st[0], st[1], uint64(st[2]) }
func bucketState(tat, origin int64, phase uint64) State { return State{tat, origin, int64(phase)} }
func (st State) sliding() window.SlidingState {
	return window.SlidingState{Index: st[0], Prev: st[1], Curr: st[2]}
}
func slidingState(s window.SlidingState) State { return State{s.Index, s.Prev, s.Curr} }
func (st State) fixed() window.FixedState      { return window.FixedState{Index: st[0], Count: st[1]} }
func fixedState(s window.FixedState) State     { return State{s.Index, s.Count} }
func (st State) quota() quota.State            { return quota.State{Start: st[0], Used: st[1]} }
func quotaState(s quota.State) State           { return State{s.Start, s.Used} }

// algorithm is one kind's definition: what every store applies, so that
// the same trace gives the same decisions whatever the store.
type algorithm interface {
	compile(l Limit) (*Spec, error)
	capacity(sp *Spec) int64
	// stateTag: see Spec.StateTag.
	stateTag(sp *Spec) string
	// step decides cost against st (exists: whether the key has a state).
	step(sp *Spec, st State, exists bool, now Now, cost int64) (State, sluice.Decision)
	// adjust applies delta (see Adjustment); ok false when nothing
	// changes. dec is the state's peek after it.
	adjust(sp *Spec, st State, exists bool, now Now, delta int64) (out State, dec sluice.Decision, ok bool)
	// refundBefore: see RefundBefore.
	refundBefore(sp *Spec, now int64, reset time.Duration) int64
	// scaled is sp with its budget divided by n > 1 (store/failover's
	// local mode), at least 1.
	scaled(sp *Spec, n int64) Spec
}

// Capacity is the largest cost an item under s can have (a Concurrency
// item takes one slot whatever its cost).
func (s *Spec) Capacity() int64 { return kinds[s.Kind].alg.capacity(s) }

// HoldsSlots reports whether s's items hold in-flight slots (leases)
// rather than a State: Concurrency.
func (s *Spec) HoldsSlots() bool { return s.Kind == Concurrency }

// StateTag is the part of s that gives a stored state its meaning: a token
// bucket's unit (its state counts units of it), a window's length (its
// state counts windows of it), a quota's period and zone; empty for
// in-flight limits, whose state (live slots) means the same under any
// spec. Keys of specs with different tags must differ (the limiter and the
// Envoy service put the tag in the key), so that a changed limit never
// reads a state written in other units: it starts anew instead. A change
// that keeps the tag (a token bucket's rate or capacity within the same
// unit, a window's or a quota's limit) keeps the state, counted against
// the new limit.
func (s *Spec) StateTag() string { return kinds[s.Kind].alg.stateTag(s) }

// Step decides cost (0 peeks) against a key's state st at now; exists
// tells whether the key has a state (else st is ignored). It returns the
// state after the decision (to keep only when the request is admitted) and
// the decision. Not for kinds that hold slots.
func (s *Spec) Step(st State, exists bool, now Now, cost int64) (State, sluice.Decision) {
	if s.Kind == TokenBucket { // the common kind, without the dynamic call (Step inlines)
		return stepBucket(s, st, exists, now, cost)
	}
	return s.stepOther(st, exists, now, cost)
}

func (s *Spec) stepOther(st State, exists bool, now Now, cost int64) (State, sluice.Decision) {
	return kinds[s.Kind].alg.step(s, st, exists, now, cost)
}

// Book is Step for an item with a MaxWait (see Item.MaxWait): a token
// bucket books cost at the earliest time it is available, going into debt,
// when that is within maxWait (wait says how long after now; the decision
// is the state's after the booking: Allowed, its Remaining and
// ResetAfter); refused otherwise, with Step's decision (nothing booked).
// Other kinds decide as Step does (wait 0). Not for kinds that hold slots.
func (s *Spec) Book(st State, exists bool, now Now, cost int64, maxWait time.Duration) (out State, dec sluice.Decision, wait time.Duration) {
	if s.Kind != TokenBucket || maxWait <= 0 {
		out, dec = s.Step(st, exists, now, cost)
		return out, dec, 0
	}
	p := &s.Bucket
	t, o, ph := st.tat()
	tat, origin, phase := BucketState(p, t, o, ph, exists, now.Mono)
	at := bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}
	nt, w, ok := p.Reserve(tat, at, cost, maxWait)
	if !ok {
		out, dec = stepBucket(s, st, exists, now, cost)
		return out, dec, 0
	}
	_, dec = p.Step(nt, at, 0)
	dec.Allowed = true // (a peek of a state in debt says not allowed)
	dec.RetryAfter = 0
	return bucketState(nt, origin, phase), dec, w
}

// Adjust applies a correction delta (see Adjustment; the caller has
// checked RefundBefore) to a key's state at now. ok is false when nothing
// changes (a refund to a window or period already over); dec is the
// state's peek after the change (its ResetAfter says when the key is new
// again). Not for kinds that hold slots.
func (s *Spec) Adjust(st State, exists bool, now Now, delta int64) (out State, dec sluice.Decision, ok bool) {
	return kinds[s.Kind].alg.adjust(s, st, exists, now, delta)
}

// Pause applies a pause of d (see Adjustment.Pause) to a key's state at
// now; ok is false for kinds that are not paused (all but TokenBucket).
// dec is the state's peek after it.
func (s *Spec) Pause(st State, exists bool, now Now, d time.Duration) (out State, dec sluice.Decision, ok bool) {
	if d <= 0 {
		return st, sluice.Decision{}, false
	}
	return s.bucketOp(st, exists, now, func(p *bucket.Params, tat int64, at bucket.Instant) int64 { return p.Pause(tat, at, d) })
}

// Lower applies a ceiling of n tokens (see Adjustment.Lower) to a key's
// state at now; ok is false for kinds that are not lowered (all but
// TokenBucket). dec is the state's peek after it.
func (s *Spec) Lower(st State, exists bool, now Now, n int64) (out State, dec sluice.Decision, ok bool) {
	return s.bucketOp(st, exists, now, func(p *bucket.Params, tat int64, at bucket.Instant) int64 { return p.Lower(tat, at, n) })
}

// bucketOp applies op, a transition of bucket.Params, to a token bucket's
// state at now (a new or full state restarting at now, as every store
// does), and peeks the result; ok is false for other kinds.
func (s *Spec) bucketOp(st State, exists bool, now Now, op func(p *bucket.Params, tat int64, at bucket.Instant) int64) (out State, dec sluice.Decision, ok bool) {
	if s.Kind != TokenBucket {
		return st, sluice.Decision{}, false
	}
	p := &s.Bucket
	t, o, ph := st.tat()
	tat, origin, phase := BucketState(p, t, o, ph, exists, now.Mono)
	at := bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}
	tat = op(p, tat, at)
	_, dec = p.Step(tat, at, 0)
	return bucketState(tat, origin, phase), dec, true
}

// Scaled returns a copy of s with its budget divided among n instances
// (each at least 1): what store/failover's local mode decides with.
func (s *Spec) Scaled(n int64) *Spec {
	if n <= 1 {
		c := *s
		return &c
	}
	c := kinds[s.Kind].alg.scaled(s, n)
	return &c
}

// RefundBefore is the time (the store's clock, Unix ns) until which an
// admitted item's cost can be returned exactly: a token bucket's until its
// tokens refill (now + its reset, saturating), a window's until the window
// ends, a quota's until its period ends; 0 for other kinds. Every store
// reports it by this rule.
func RefundBefore(sp *Spec, now int64, reset time.Duration) int64 {
	return kinds[sp.Kind].alg.refundBefore(sp, now, reset)
}

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

// The kinds.

type bucketKind struct{}

func (bucketKind) compile(l Limit) (*Spec, error) { return NewBucketSpec(l.Bucket) }
func (bucketKind) capacity(sp *Spec) int64        { return sp.Bucket.Limit().Capacity }
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

// windowKind is what the sliding and the fixed window share.
type windowKind struct{}

func (windowKind) capacity(sp *Spec) int64 { return sp.Window.Limit }
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

type concKind struct{}

func (concKind) compile(l Limit) (*Spec, error) {
	if l.MaxInFlight < 1 {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "max_in_flight %d must be at least 1", l.MaxInFlight)
	}
	if l.LeaseTTL <= 0 {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "lease_ttl %v must be positive", l.LeaseTTL)
	}
	return &Spec{Kind: Concurrency, MaxInFlight: l.MaxInFlight, LeaseTTL: l.LeaseTTL}, nil
}
func (concKind) capacity(sp *Spec) int64 { return sp.MaxInFlight }
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

type quotaKind struct{}

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
