// The kind table: each kind of limit's name, traits and algorithm, and the
// methods of Kind, Limit and Spec through which everything else reads them.

package store

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/window"
)

// Kind is what a limit counts. It is the one kind type of sluice: the
// policy, the limiter, every store, the simulator and the servers name
// kinds by it. All that differs between kinds is in the kind table below
// and is read through the methods of Kind, Limit and Spec, so that no
// other package tests for a kind; the Redis store mirrors each kind in its
// codec (store/redisstore/codec.go: its letter and parameters) and its
// script (kinds.lua).
type Kind uint8

const (
	// TokenBucket: Limit.Bucket, compiled into Spec.Bucket.
	TokenBucket Kind = iota
	// SlidingWindow: Limit.Window.
	SlidingWindow
	// Concurrency: Limit.MaxInFlight slots held at once, each expiring
	// after Limit.SlotTTL unless released.
	Concurrency
	// FixedWindow: Limit.Window, reset at each boundary (a baseline).
	FixedWindow
	// Quota: Limit.Quota, a calendar quota reset at each period's start.
	Quota

	numKinds
)

// kindDef is one kind's entry in the kind table.
type kindDef struct {
	name string // Kind.String
	// alg is the kind's algorithm (its file: kind_<name>.go). The optional
	// interfaces it implements are its traits: pauser (Kind.Pausable),
	// booker (Kind.Books), converter (Kind.Convertible).
	alg algorithm
	// slots: its items hold in-flight slots kept by the store (a slot
	// each), not a State (Kind.HoldsSlots).
	slots bool
	// leased: store/lease may serve its items from token batches held in
	// process (Kind.Leasable).
	leased bool
}

// kinds is the kind table, indexed by Kind. Adding a kind is:
//
//  1. here: a constant above (before numKinds), its row in kinds and its
//     place in kindOrder; its parameters' fields in Limit (and Spec) when
//     no field there holds them;
//  2. its algorithm, in a file of its own (store/kind_<name>.go): a type
//     implementing algorithm, and pauser, booker or converter if it has
//     those traits;
//  3. policy/kinds.go: its row in kindDefs (the fields a policy writes
//     and their parse function); policy/policy.go: its constant's alias;
//  4. store/redisstore: its letter and parameters in codec.go, its
//     transitions in kinds.lua (KIND.<letter>).
//
// That is 5 Go files (one of them new) and 1 Lua file, and its tests (a
// limit of it in this package's TestKinds and TestKindTraits, its cases in
// store/storetest, policy and store/redisstore). Stores, the limiter, the
// servers and the simulator read kinds only through the table, so nothing
// else changes (but a kind that holds slots, whose slots each store keeps
// itself, as Concurrency's); TestKindTestsOnlyInTheTable fails when code
// elsewhere tests for a kind.
var kinds = [numKinds]kindDef{
	TokenBucket:   {name: "token_bucket", alg: bucketKind{}, leased: true},
	SlidingWindow: {name: "sliding_window", alg: slidingKind{}},
	FixedWindow:   {name: "fixed_window", alg: fixedKind{}},
	Concurrency:   {name: "concurrency", alg: concKind{}, slots: true},
	Quota:         {name: "quota", alg: quotaKind{}},
}

// kindOrder is the order in which kinds are listed to people.
var kindOrder = []Kind{TokenBucket, SlidingWindow, FixedWindow, Concurrency, Quota}

// algorithm is one kind's definition: what is shown of a limit of it, and
// what every store applies, so that the same trace gives the same
// decisions whatever the store.
type algorithm interface {
	// shape: see Limit.Shape.
	shape(l *Limit) Shape
	// logAttrs: see Limit.LogAttrs.
	logAttrs(l *Limit, attrs []slog.Attr, cost, remaining int64) []slog.Attr
	compile(l Limit) (*Spec, error)
	capacity(sp *Spec) int64
	// rate: see Spec.Rate.
	rate(sp *Spec) float64
	// stateTag: see Spec.StateTag.
	stateTag(sp *Spec) string
	// step decides cost against st (exists: whether the key has a state).
	// Kinds that hold slots panic (their slots are the store's own).
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

// pauser is implemented by the algorithms of kinds that can be paused and
// lowered (Spec.Pause, Spec.Lower); dec is the state's peek after it.
type pauser interface {
	pause(sp *Spec, st State, exists bool, now Now, d time.Duration) (State, sluice.Decision)
	lower(sp *Spec, st State, exists bool, now Now, n int64) (State, sluice.Decision)
}

// booker is implemented by the algorithms of kinds whose items with a
// MaxWait may be booked (Spec.Book); ok false when cost cannot be booked
// within maxWait.
type booker interface {
	book(sp *Spec, st State, exists bool, now Now, cost int64, maxWait time.Duration) (out State, dec sluice.Decision, wait time.Duration, ok bool)
}

// converter is implemented by the algorithms of kinds that are a capacity
// and a rate, which can be counted by one another (Limit.As).
type converter interface {
	// asRate is l's capacity and rate (per second).
	asRate(l *Limit) (capacity int64, rate float64)
	// fromRate sets l's fields of the kind to capacity at rate; the error
	// matches sluice.ErrInvalidLimit when they make no valid limit.
	fromRate(l *Limit, capacity int64, rate float64) error
}

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
	return 0, fmt.Errorf("unknown algorithm %q (want %s)", s, orList(names))
}

// orList is "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// HoldsSlots reports whether the items of kind k hold in-flight slots: a
// request takes one slot whatever its cost (so a cost never exceeds the
// capacity), keeps it until it is released (Store.Release) or its slot
// expires, and is not adjusted, paused or lowered; the store keeps the
// slots itself, not a State (Spec.Step does not apply). Concurrency
// limits; false for a value that is no Kind constant.
func (k Kind) HoldsSlots() bool { return k < numKinds && kinds[k].slots }

// Blockable reports whether limits of kind k can have a BlockFor (a
// penalty box): every kind but those that hold slots, whose refusals end
// as soon as a slot is released (Concurrency). False for a value that is
// no Kind constant.
func (k Kind) Blockable() bool { return k < numKinds && !kinds[k].slots }

// Pausable reports whether limits of kind k can be paused and given a
// ceiling (Adjustment.Pause and Lower, Spec.Pause and Lower, a limiter's
// Pause): token buckets. An adjustment of either kind on other kinds
// changes nothing (Adjustment.Op is 0).
func (k Kind) Pausable() bool {
	if k >= numKinds {
		return false
	}
	_, ok := kinds[k].alg.(pauser)
	return ok
}

// Books reports whether items of kind k with a MaxWait can be booked, in
// debt, to be served later (Item.MaxWait, Spec.Book): token buckets.
// Items of other kinds admit now or not at all.
func (k Kind) Books() bool {
	if k >= numKinds {
		return false
	}
	_, ok := kinds[k].alg.(booker)
	return ok
}

// Leasable reports whether store/lease may serve items of kind k from
// token batches taken from the shared store in advance: token buckets.
// Items of other kinds (and peeks) go to the shared store every time.
func (k Kind) Leasable() bool { return k < numKinds && kinds[k].leased }

// Convertible reports whether a limit of kind k is a capacity and a rate,
// so that it can be counted by any other convertible kind (Limit.As; the
// simulator's --compare): token buckets, sliding and fixed windows, but
// not in-flight caps or calendar quotas.
func (k Kind) Convertible() bool {
	if k >= numKinds {
		return false
	}
	_, ok := kinds[k].alg.(converter)
	return ok
}

// Limit is a limit as written, before compilation: its kind and the fields
// of that kind (the others are ignored). policy.Limit embeds it.
type Limit struct {
	Kind Kind
	// Bucket is a token bucket's capacity and refill per second (a new
	// key starts full).
	Bucket bucket.Limit
	// Window is a sliding or a fixed window's limit per window.
	Window window.Limit
	// MaxInFlight is a concurrency limit's slots held at once; SlotTTL
	// how long a slot not released holds.
	MaxInFlight int64
	SlotTTL     time.Duration
	// Quota is a calendar quota's limit per period in a zone.
	Quota quota.Limit
	// BlockFor, when positive, is the limit's penalty box (policy
	// block_for): a key it refuses stays refused this long from the
	// refusal (Spec.Penalize). Only for Blockable kinds, at most
	// MaxBlockFor.
	BlockFor time.Duration
	// FairShare, when On, divides a token bucket's refill between tenants
	// while it is contended (policy fair_share; Kind.Shares). Zero: none.
	FairShare FairShare
}

// Shape is a limit's terms as they are shown (a policy listing, a
// decision's status, a refusal's log, Envoy's current limit). Each field
// holds its kind's value and is zero for kinds that have none.
type Shape struct {
	// Capacity is the largest cost one request can have: a bucket's
	// capacity, a window's or a quota's limit; a concurrency limit's
	// max_in_flight (it counts requests, each holding one slot, not cost).
	Capacity int64
	// Rate is the tokens per second a token bucket refills.
	Rate float64
	// Window is a sliding or a fixed window's length.
	Window time.Duration
	// SlotTTL is how long a concurrency slot not released holds.
	SlotTTL time.Duration
	// Period and Timezone are a quota's calendar period ("day", "week",
	// "month", "year") and the name of its zone.
	Period, Timezone string
	// Span is the time the capacity covers where it is not the time to
	// refill: Window, SlotTTL (the longest a slot stays taken), or a
	// quota's nominal period (quota.Period.Nominal); 0 for token buckets.
	Span time.Duration
}

// Shape returns l's terms as its kind states them (zero for a value that
// is no Kind constant).
func (l *Limit) Shape() Shape {
	if l.Kind >= numKinds {
		return Shape{}
	}
	return kinds[l.Kind].alg.shape(l)
}

// Capacity is the largest cost one request can have under l (Shape's
// Capacity: a concurrency limit's max_in_flight).
func (l *Limit) Capacity() int64 { return l.Shape().Capacity }

// Span is Shape's Span: a window's length, a concurrency limit's
// lease_ttl, a quota's nominal period; 0 for token buckets.
func (l *Limit) Span() time.Duration { return l.Shape().Span }

// LogAttrs appends to attrs the attributes of a decision under l that
// logs show (docs/behaviour.md's refusal log), cost being the request's
// cost and remaining what the limit had left: a token bucket's
// bucket_capacity and refill_per_second, a window's window_limit and
// window_ms, a quota's quota_limit, period and timezone, each followed by
// token_cost and tokens_remaining; a concurrency limit's max_in_flight
// and in_flight (its capacity less remaining). Nothing for a value that
// is no Kind constant.
func (l *Limit) LogAttrs(attrs []slog.Attr, cost, remaining int64) []slog.Attr {
	if l.Kind >= numKinds {
		return attrs
	}
	return kinds[l.Kind].alg.logAttrs(l, attrs, cost, remaining)
}

// costAttrs are the attributes most kinds' logs end with.
func costAttrs(attrs []slog.Attr, cost, remaining int64) []slog.Attr {
	return append(attrs, slog.Int64("token_cost", cost), slog.Int64("tokens_remaining", remaining))
}

// As returns l counted by kind k at the same capacity and rate, its other
// fields kept: a token bucket (B, r) as a window is B per B/r seconds (the
// time to refill B), a window of N per W as a token bucket has capacity N
// refilled at N/W per second, and a window as the other window keeps N
// per W. l itself when k is l's kind. The error matches
// sluice.ErrInvalidLimit when either kind is not Convertible or the
// result is no valid limit (a window that long or that short).
func (l *Limit) As(k Kind) (Limit, error) {
	if l.Kind == k {
		return *l, nil
	}
	var from, to converter
	if l.Kind.Convertible() && k.Convertible() {
		from, to = kinds[l.Kind].alg.(converter), kinds[k].alg.(converter)
	}
	if from == nil || to == nil {
		return *l, sluice.Errorf(sluice.ErrInvalidLimit, "a %s limit cannot be counted as %s", l.Kind, k)
	}
	c, r := from.asRate(l)
	out := *l
	out.Kind = k
	if err := to.fromRate(&out, c, r); err != nil {
		return *l, err
	}
	return out, nil
}

// Spec is a limit as a store sees it: its kind and that kind's compiled
// fields (NewSpec; the others are zero). Specs are immutable and shared;
// a store may key caches by their pointer.
type Spec struct {
	Kind        Kind
	Bucket      bucket.Params // TokenBucket
	Window      window.Limit  // SlidingWindow, FixedWindow
	MaxInFlight int64         // Concurrency
	SlotTTL     time.Duration // Concurrency
	Quota       quota.Limit   // Quota (Location never nil)
	// OnStoreError is what a store that can fail (store/failover) does for
	// this limit when its backend is unreachable: FailOpen, FailClosed or
	// Local; empty means the store's default.
	OnStoreError string
	// BlockFor is the limit's penalty box (Limit.BlockFor; 0: none). Every
	// store applies it by Spec.Penalize and keeps a key's block with its
	// state.
	BlockFor time.Duration
	// FairShare, on a token-bucket Spec, divides the refill between
	// tenants while the bucket is contended (Item.Tenant, Item.Weight;
	// Spec.DecideShare). Nil: none. Its Tag is part of the spec's identity.
	FairShare *FairShare
}

// NewSpec validates and compiles l; the error matches
// sluice.ErrInvalidLimit when l is unusable.
func NewSpec(l Limit) (*Spec, error) {
	if l.Kind >= numKinds {
		return nil, sluice.Errorf(sluice.ErrInvalidLimit, "unknown kind %d", l.Kind)
	}
	if err := checkBlockFor(l.Kind, l.BlockFor); err != nil {
		return nil, err
	}
	if err := l.FairShare.check(l.Kind); err != nil {
		return nil, err
	}
	sp, err := kinds[l.Kind].alg.compile(l)
	if err == nil {
		sp.BlockFor = l.BlockFor
		if l.FairShare.On() {
			fs := l.FairShare
			sp.FairShare = &fs
		}
	}
	return sp, err
}

// Now is a decision's time as a store reads it: Mono is ns on the store's
// own time base (token buckets count from it), Wall is Unix ns (windows
// and quotas align to the calendar).
type Now struct{ Mono, Wall int64 }

// State is a key's state as a Go store holds it, three integers whose
// meaning is the kind's (named by the accessors in each kind's file): a
// token bucket's TAT, origin and phase (bucket.Params' units); a sliding
// window's index, previous and current counts; a fixed window's index and
// count; a quota's period start and used cost. Kinds that hold slots have
// none (their slots are the store's own).
type State [3]int64

// Capacity is the largest cost an item under s can have (an item of a
// kind that holds slots takes one slot whatever its cost).
func (s *Spec) Capacity() int64 { return kinds[s.Kind].alg.capacity(s) }

// HoldsSlots reports whether s's items hold in-flight slots
// rather than a State (Kind.HoldsSlots).
func (s *Spec) HoldsSlots() bool { return s.Kind.HoldsSlots() }

// Rate is the tokens per second an emptied state of s regains
// continuously (a token bucket's refill); 0 for kinds that regain their
// budget otherwise (a window's or a period's end, a slot's release).
func (s *Spec) Rate() float64 { return kinds[s.Kind].alg.rate(s) }

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

// Book is Step for an item with a MaxWait (see Item.MaxWait): a kind that
// Books (a token bucket) books cost at the earliest time it is available,
// going into debt, when that is within maxWait (wait says how long after
// now; the decision is the state's after the booking: Allowed, its
// Remaining and ResetAfter); refused otherwise, with Step's decision
// (nothing booked). Other kinds decide as Step does (wait 0). Not for
// kinds that hold slots.
func (s *Spec) Book(st State, exists bool, now Now, cost int64, maxWait time.Duration) (out State, dec sluice.Decision, wait time.Duration) {
	if b, ok := kinds[s.Kind].alg.(booker); ok && maxWait > 0 {
		if out, dec, wait, ok = b.book(s, st, exists, now, cost, maxWait); ok {
			return out, dec, wait
		}
	}
	out, dec = s.Step(st, exists, now, cost)
	return out, dec, 0
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
// now; ok is false when d <= 0 or the kind is not Pausable. dec is the
// state's peek after it.
func (s *Spec) Pause(st State, exists bool, now Now, d time.Duration) (out State, dec sluice.Decision, ok bool) {
	p, ok := kinds[s.Kind].alg.(pauser)
	if !ok || d <= 0 {
		return st, sluice.Decision{}, false
	}
	out, dec = p.pause(s, st, exists, now, d)
	return out, dec, true
}

// Lower applies a ceiling of n tokens (see Adjustment.Lower) to a key's
// state at now; ok is false for kinds that are not Pausable. dec is the
// state's peek after it.
func (s *Spec) Lower(st State, exists bool, now Now, n int64) (out State, dec sluice.Decision, ok bool) {
	p, ok := kinds[s.Kind].alg.(pauser)
	if !ok {
		return st, sluice.Decision{}, false
	}
	out, dec = p.lower(s, st, exists, now, n)
	return out, dec, true
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
// ends, a quota's until its period ends; 0 for kinds that hold slots.
// Every store reports it by this rule.
func RefundBefore(sp *Spec, now int64, reset time.Duration) int64 {
	return kinds[sp.Kind].alg.refundBefore(sp, now, reset)
}
