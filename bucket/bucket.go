// Package bucket is an exact, lock-free token bucket (docs/behaviour.md section 1).
//
// A Bucket holds at most Capacity tokens and gains Rate tokens per second.
// Allow takes tokens now or not at all; Reserve books future tokens (the
// bucket may go into debt, so waiters are served in arrival order); Wait
// blocks until a reservation is due. Every decision is one compare-and-swap
// on one int64 (the GCRA theoretical arrival time in fixed-point token
// units, see Params), so two callers can never spend the same token and no
// mutex is taken on the decision path.
//
// Arithmetic is exact: the rate is an exact ratio of integers and the
// virtual token clock is a floor of an exact function of time, so over any
// interval of length t starting full, the admitted cost is at most
// Capacity + Rate*t, whatever the sequence of calls, and at least that minus
// one unit (see Params) per decision. Time comes from the monotonic
// clock; a time earlier than one already seen (a stale AllowAt, a clock that
// steps back) counts as the latest time seen, so it neither adds nor removes
// credit.
package bucket

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Option configures New.
type Option func(*config)

type config struct {
	clock sluice.Clock
	empty bool
}

// WithClock makes the bucket read time from c instead of the monotonic
// system clock. Useful with fake clocks in tests and simulators.
func WithClock(c sluice.Clock) Option { return func(o *config) { o.clock = c } }

// StartEmpty makes a new bucket start with no tokens instead of full. Which
// one is right is part of the traffic contract: an empty start forbids the
// initial burst.
func StartEmpty() Option { return func(o *config) { o.empty = true } }

const frozen = math.MinInt64 // state value of an epoch being replaced

// epoch is the bucket's current parameters and origin together with its
// state. Parameters and origin never change; to change them (rebase,
// SetLimit) the state is frozen and a new epoch is published.
type epoch struct {
	p       Params
	origin  int64  // ns since Bucket.t0 at which V = 0
	phase   uint64 // fraction of a unit the virtual clock had at origin
	initial bool   // the epoch made by New (may be re-anchored once)
	init    int64  // the state the epoch was published with
	_       [64]byte
	tat     atomic.Int64
	_       [56]byte
}

// Bucket is a token bucket. It is safe for concurrent use. Create buckets
// with New: the zero Bucket holds nothing and never panics, but every
// method that returns an error returns one matching sluice.ErrInvalidLimit
// ("bucket: not made with bucket.New"), Tokens and TokensAt return 0, Limit
// returns the zero Limit and Undo returns false.
type Bucket struct {
	ep    atomic.Pointer[epoch]
	clock sluice.Clock // nil: the monotonic system clock
	t0    time.Time    // all times are ns since t0
	mu    sync.Mutex   // serialises epoch changes
	_     [40]byte
	seen  atomic.Int64 // latest time seen from a Clock or AllowAt
}

// errNotMade is the error of every method of a zero Bucket.
var errNotMade = sluice.Errorf(sluice.ErrInvalidLimit, "bucket: not made with bucket.New")

// New returns a bucket with limit l, full unless StartEmpty is given. An
// invalid limit returns an error matching sluice.ErrInvalidLimit.
func New(l Limit, opts ...Option) (*Bucket, error) {
	p, err := Compile(l)
	if err != nil {
		return nil, err
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	b := &Bucket{clock: c.clock}
	if c.clock != nil {
		b.t0 = c.clock.Now()
	} else {
		b.t0 = time.Now()
	}
	b.seen.Store(math.MinInt64)
	b.publish(p, 0, 0, p.Initial(c.empty), true)
	return b, nil
}

// Limit returns the bucket's current limit (the zero Limit for a zero
// Bucket).
func (b *Bucket) Limit() Limit {
	ep := b.ep.Load()
	if ep == nil {
		return Limit{}
	}
	return ep.p.limit
}

// now returns the current time in ns since t0.
func (b *Bucket) now() int64 {
	if b.clock == nil {
		return int64(time.Since(b.t0)) // one monotonic read, no wall clock
	}
	return b.at(b.clock.Now())
}

// at converts t to ns since t0, never earlier than the latest time seen.
func (b *Bucket) at(t time.Time) int64 {
	d := int64(t.Sub(b.t0))
	for {
		s := b.seen.Load()
		if d <= s {
			return s
		}
		if b.seen.CompareAndSwap(s, d) {
			return d
		}
	}
}

// Allow takes cost tokens now, or nothing: the decision says which. Cost 0
// is a peek that consumes nothing and reports the tokens held. A cost above
// the capacity returns sluice.ErrCostExceedsCapacity and a negative cost
// sluice.ErrInvalidCost; nothing is consumed then. Allow does not allocate.
func (b *Bucket) Allow(cost int64) (sluice.Decision, error) {
	if b.clock == nil {
		return b.decide(int64(time.Since(b.t0)), cost)
	}
	return b.decide(b.at(b.clock.Now()), cost)
}

// AllowAt is Allow at time now instead of the clock's reading, in the style
// of x/time/rate's AllowN: simulators drive virtual time with it. A time
// earlier than one already seen counts as the latest seen, so a stale time
// never creates credit. Times are measured from the bucket's creation (its
// clock's reading in New); if the first time the bucket is given is earlier
// than that, it becomes the bucket's start instead.
func (b *Bucket) AllowAt(now time.Time, cost int64) (sluice.Decision, error) {
	return b.decide(b.at(now), cost)
}

func (b *Bucket) decide(d, cost int64) (sluice.Decision, error) {
	for {
		ep, at, tat := b.snapshot(d)
		if ep == nil {
			return sluice.Decision{}, errNotMade
		}
		if uint64(cost) > uint64(ep.p.limit.Capacity) { // (a negative cost too: one compare)
			return sluice.Decision{}, costError(cost, ep.p.limit.Capacity)
		}
		nt, dec, again := ep.p.step(tat, at, cost, true)
		if again {
			b.reanchor(ep, tat, at)
			continue
		}
		if nt == tat || ep.tat.CompareAndSwap(tat, nt) {
			return dec, nil
		}
	}
}

// reanchor restarts a full bucket exactly: a new epoch whose origin is the
// instant at (so the virtual clock reads exactly 0 there, with no fraction
// for the restart to round away). Nothing is lost or created: a full bucket
// is the same whatever its origin. It does nothing if the state changed
// meanwhile (the caller takes a new snapshot either way).
func (b *Bucket) reanchor(ep *epoch, tat int64, at Instant) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ep.Load() != ep || ep.tat.Load() != tat {
		return
	}
	b.freeze(ep)
	b.publish(ep.p, ep.origin+at.Elapsed, 0, 0, false)
}

// snapshot returns the current epoch, the instant of d in it and its state,
// first rebasing or re-anchoring the epoch when d is outside its range and
// waiting out a concurrent epoch change. The caller applies its transition
// with a CAS on the epoch's state and calls snapshot again if that fails.
// The epoch is nil for a zero Bucket.
func (b *Bucket) snapshot(d int64) (*epoch, Instant, int64) {
	for {
		ep := b.ep.Load()
		if ep == nil {
			return nil, Instant{}, 0
		}
		dn := d - ep.origin
		if uint64(dn) > uint64(ep.p.maxElap) { // (dn < 0 or past MaxElapsed: one compare)
			if b.fixEpoch(ep, d) {
				continue
			}
			dn = 0
		}
		tat := ep.tat.Load()
		if tat == frozen {
			b.awaitEpoch()
			continue
		}
		return ep, Instant{dn, ep.phase}, tat
	}
}

// fixEpoch handles a time outside ep's range: past MaxElapsed it rebases, and
// before the origin of an untouched new bucket it re-anchors the origin. It
// reports whether the caller should reload the epoch; false means the time
// is stale and counts as the origin.
func (b *Bucket) fixEpoch(ep *epoch, d int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ep.Load() != ep {
		return true
	}
	dn := d - ep.origin
	switch {
	case dn > ep.p.maxElap:
		b.rebaseLocked(ep, dn)
		return true
	case dn < 0 && ep.initial && ep.tat.Load() == ep.init:
		tat := b.freeze(ep)
		b.publish(ep.p, d, 0, tat, true)
		return true
	}
	return false
}

// rebaseLocked moves ep's origin forward by up to dn; b.mu must be held.
func (b *Bucket) rebaseLocked(ep *epoch, dn int64) {
	tat := b.freeze(ep)
	nt, applied, phase := ep.p.Rebase(tat, Instant{dn, ep.phase})
	b.publish(ep.p, ep.origin+applied, phase, nt, false)
}

// awaitEpoch waits until a concurrent epoch change (rebase, SetLimit) that
// froze the state has published the new epoch: the changer holds mu.
func (b *Bucket) awaitEpoch() {
	b.mu.Lock()
	//lint:ignore SA2001 taking the lock is the wait; nothing is guarded here
	b.mu.Unlock()
}

// freeze takes ep's state for replacement; b.mu must be held.
func (b *Bucket) freeze(ep *epoch) int64 {
	for {
		t := ep.tat.Load()
		if ep.tat.CompareAndSwap(t, frozen) {
			return t
		}
	}
}

func (b *Bucket) publish(p Params, origin int64, phase uint64, tat int64, initial bool) {
	ep := &epoch{p: p, origin: origin, phase: phase, initial: initial, init: tat}
	ep.tat.Store(tat)
	b.ep.Store(ep)
}

// SetLimit changes the bucket's limit at once, keeping the tokens it holds
// (and any debt to reservations): credit is neither created nor lost, except
// that tokens above a smaller capacity are dropped. An invalid limit returns
// an error matching sluice.ErrInvalidLimit and changes nothing.
func (b *Bucket) SetLimit(l Limit) error {
	return b.setLimitAt(b.now(), l)
}

// SetLimitAt is SetLimit at time now (see AllowAt).
func (b *Bucket) SetLimitAt(now time.Time, l Limit) error {
	return b.setLimitAt(b.at(now), l)
}

func (b *Bucket) setLimitAt(d int64, l Limit) error {
	if b.ep.Load() == nil {
		return errNotMade
	}
	q, err := Compile(l)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := b.ep.Load()
	for d-ep.origin > ep.p.maxElap {
		b.rebaseLocked(ep, d-ep.origin)
		ep = b.ep.Load()
	}
	dn := max(d-ep.origin, 0)
	tat := b.freeze(ep)
	b.publish(q, ep.origin+dn, 0, ep.p.Convert(tat, Instant{dn, ep.phase}, &q), false)
	return nil
}

// Tokens returns the tokens the bucket holds now, negative while it is in
// debt to reservations. It is for display: use Allow(0) to peek in decisions.
func (b *Bucket) Tokens() float64 { return b.tokensAt(b.now()) }

// TokensAt is Tokens at time now (see AllowAt).
func (b *Bucket) TokensAt(now time.Time) float64 { return b.tokensAt(b.at(now)) }

func (b *Bucket) tokensAt(d int64) float64 {
	for {
		ep := b.ep.Load()
		if ep == nil {
			return 0
		}
		tat := ep.tat.Load()
		if tat == frozen {
			continue
		}
		dn := min(max(d-ep.origin, 0), ep.p.maxElap)
		return float64(ep.p.Tokens(tat, Instant{dn, ep.phase})) / float64(ep.p.unit)
	}
}

// Reservation is cost tokens booked by Reserve, due after a delay.
type Reservation struct {
	b    *Bucket
	cost int64
	act  int64 // ns since b.t0 at which the tokens are there
	// refund is the ns since b.t0 before which the booked tokens are not
	// yet refilled: until then no later decision can have found the bucket
	// full, so returning them is exact.
	refund int64
	done   atomic.Bool
}

// Reserve books cost tokens at the earliest time they are available and
// returns a reservation saying when that is. Later reservations queue behind
// it (the bucket goes into debt), so waiters are served in arrival order.
// If the wait would exceed maxWait it books nothing and returns an error
// matching sluice.ErrWaitTooLong; cost errors are as for Allow.
func (b *Bucket) Reserve(cost int64, maxWait time.Duration) (*Reservation, error) {
	return b.reserve(b.now(), cost, maxWait)
}

// ReserveAt is Reserve at time now (see AllowAt).
func (b *Bucket) ReserveAt(now time.Time, cost int64, maxWait time.Duration) (*Reservation, error) {
	return b.reserve(b.at(now), cost, maxWait)
}

func (b *Bucket) reserve(d, cost int64, maxWait time.Duration) (*Reservation, error) {
	for {
		ep, at, tat := b.snapshot(d)
		if ep == nil {
			return nil, errNotMade
		}
		if cost < 0 || cost > ep.p.limit.Capacity {
			return nil, costError(cost, ep.p.limit.Capacity)
		}
		if cost > 0 && ep.p.inexactRestart(tat, at) {
			b.reanchor(ep, tat, at)
			continue
		}
		nt, wait, ok := ep.p.Reserve(tat, at, cost, max(maxWait, 0))
		if !ok {
			return nil, sluice.Errorf(sluice.ErrWaitTooLong, "cost %d would wait %v, more than the maximum %v", cost, wait, max(maxWait, 0))
		}
		if ep.tat.CompareAndSwap(tat, nt) {
			refund := int64(math.MaxInt64)
			if n, ok := ep.p.Nanos(nt, ep.phase); ok && n <= math.MaxInt64-ep.origin {
				refund = ep.origin + n
			}
			return &Reservation{b: b, cost: cost, act: d + int64(wait), refund: refund}, nil
		}
	}
}

// Wait blocks until cost tokens are taken or ctx ends. If ctx's deadline
// comes before the tokens would be there, it fails at once with an error
// matching sluice.ErrWaitTooLong and takes nothing; if ctx ends while
// waiting, the booked tokens are returned exactly and ctx's error is
// returned. Wait sleeps on real timers (virtual inside a testing/synctest
// bubble) even when the bucket has a Clock.
func (b *Bucket) Wait(ctx context.Context, cost int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var d int64
	var nowT time.Time
	if b.clock == nil {
		nowT = time.Now()
		d = int64(nowT.Sub(b.t0))
	} else {
		nowT = b.clock.Now()
		d = b.at(nowT)
	}
	maxWait := time.Duration(math.MaxInt64)
	if dl, ok := ctx.Deadline(); ok {
		maxWait = dl.Sub(nowT)
	}
	r, err := b.reserve(d, cost, maxWait)
	if err != nil {
		return err
	}
	wait := time.Duration(r.act - d)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}

// Cost returns the reserved cost.
func (r *Reservation) Cost() int64 { return r.cost }

// Delay returns how long from now the caller must wait before acting on the
// reservation (0 when the tokens are already there).
func (r *Reservation) Delay() time.Duration { return r.delayAt(r.b.now()) }

// DelayFrom is Delay measured from time now.
func (r *Reservation) DelayFrom(now time.Time) time.Duration { return r.delayAt(r.b.at(now)) }

func (r *Reservation) delayAt(d int64) time.Duration { return time.Duration(max(r.act-d, 0)) }

// Cancel gives the reservation back: it returns the booked tokens exactly,
// as if they had never been taken, also when later reservations exist (they
// keep their place and may act no later than they were told). That holds
// until the booked tokens would have been refilled (the reservation's time
// to act plus the time to refill them); after that the tokens count as
// spent and Cancel does nothing, so a late Cancel can never create credit.
// Cancel, and Settle, take effect once; later calls do nothing.
func (r *Reservation) Cancel() { r.cancelAt(r.b.now()) }

// CancelAt is Cancel at time now (see AllowAt).
func (r *Reservation) CancelAt(now time.Time) { r.cancelAt(r.b.at(now)) }

func (r *Reservation) cancelAt(d int64) {
	if r.done.CompareAndSwap(false, true) && d < r.refund {
		r.b.adjust(-r.cost)
	}
}

// Settle replaces the reservation's cost by actual, for costs known only
// afterwards (LLM tokens, bytes): a smaller actual returns the difference
// exactly (under the same condition as Cancel), a larger one charges the
// excess at once, pushing the bucket into debt so that later callers wait.
// A negative actual returns an error matching sluice.ErrInvalidCost and
// changes nothing; a reservation already cancelled or settled returns an
// error and changes nothing.
func (r *Reservation) Settle(actual int64) error { return r.settleAt(r.b.now(), actual) }

// SettleAt is Settle at time now (see AllowAt).
func (r *Reservation) SettleAt(now time.Time, actual int64) error {
	return r.settleAt(r.b.at(now), actual)
}

func (r *Reservation) settleAt(d, actual int64) error {
	if actual < 0 {
		return sluice.Errorf(sluice.ErrInvalidCost, "actual cost %d is negative", actual)
	}
	if !r.done.CompareAndSwap(false, true) {
		return errors.New("sluice: reservation already cancelled or settled")
	}
	switch delta := actual - r.cost; {
	case delta < 0 && d < r.refund:
		r.b.adjust(delta)
	case delta > 0:
		r.b.charge(d, delta)
	}
	return nil
}

// Receipt records tokens taken by Take, so that Undo can give them back.
// The zero Receipt records nothing.
type Receipt struct {
	cost  int64
	until int64 // ns since t0 before which the tokens are not yet refilled
}

// Take is Allow that also returns a receipt for the tokens taken (when
// admitted with a cost above 0). It does not allocate.
func (b *Bucket) Take(cost int64) (sluice.Decision, Receipt, error) {
	d := b.now()
	dec, err := b.decide(d, cost)
	if err != nil || !dec.Allowed || cost == 0 {
		return dec, Receipt{}, err
	}
	return dec, Receipt{cost: cost, until: d + int64(dec.ResetAfter)}, nil
}

// Undo gives back the tokens of a receipt exactly, as if never taken,
// provided they are not yet refilled (the decision's time plus its
// ResetAfter): until then no later decision can have found the bucket full.
// After that the tokens count as spent and Undo does nothing, so it can
// never create credit. It reports whether it gave the tokens back. Undo a
// receipt once.
func (b *Bucket) Undo(r Receipt) bool {
	if r.cost <= 0 || b.ep.Load() == nil || b.now() >= r.until {
		return false
	}
	b.adjust(-r.cost)
	return true
}

// adjust adds delta tokens' worth of units to the state (negative: return).
func (b *Bucket) adjust(delta int64) {
	for {
		ep := b.ep.Load()
		tat := ep.tat.Load()
		if tat == frozen {
			b.awaitEpoch()
			continue
		}
		if ep.tat.CompareAndSwap(tat, ep.p.Refund(tat, -delta)) {
			return
		}
	}
}

// charge takes n tokens at d whatever the bucket holds, going into debt.
func (b *Bucket) charge(d, n int64) {
	for {
		ep, at, tat := b.snapshot(d)
		if ep.tat.CompareAndSwap(tat, ep.p.Charge(tat, at, n)) {
			return
		}
	}
}
