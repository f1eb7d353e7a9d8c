// Package window holds window counters (docs/behaviour.md section 2): the
// sliding-window counter, which estimates the rate over the last window from two fixed
// windows, and the fixed-window counter, kept as the baseline that shows the
// boundary double burst.
//
// Windows align to the clock's epoch (Unix time 0), so counters in
// different processes agree on window boundaries, and they may read wall
// time. A time earlier than one already seen counts as the latest seen.
// Arithmetic is exact integer math (128-bit intermediates): the estimate
// previous*(1 - elapsed/W) + current is never rounded.
package window

import (
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// MaxLimit is the largest window limit: counts stay below 2^63 with room
// for one limit of debt and a cost.
const MaxLimit = 1 << 61

// Limit is at most Limit units of cost per Window.
type Limit struct {
	// Limit is N, the cost admitted per window. It must be 1 to MaxLimit.
	Limit int64
	// Window is W. It must be > 0.
	Window time.Duration
}

// Validate returns an error matching sluice.ErrInvalidLimit when l is
// unusable.
func (l Limit) Validate() error {
	if l.Limit < 1 || l.Limit > MaxLimit {
		return sluice.Errorf(sluice.ErrInvalidLimit, "window limit %d must be 1 to 2^61", l.Limit)
	}
	if l.Window <= 0 {
		return sluice.Errorf(sluice.ErrInvalidLimit, "window %v must be positive", l.Window)
	}
	return nil
}

// CheckCost returns nil when 0 <= cost <= l.Limit, else an error matching
// sluice.ErrInvalidCost or sluice.ErrCostExceedsCapacity.
func (l Limit) CheckCost(cost int64) error {
	if cost < 0 {
		return sluice.Errorf(sluice.ErrInvalidCost, "cost %d is negative", cost)
	}
	if cost > l.Limit {
		return sluice.Errorf(sluice.ErrCostExceedsCapacity, "cost %d exceeds capacity %d", cost, l.Limit)
	}
	return nil
}

// split returns the window index of now (ns since the Unix epoch) and the
// ns elapsed in that window.
func (l Limit) split(now int64) (idx, e int64) {
	w := int64(l.Window)
	idx, e = now/w, now%w
	if e < 0 {
		idx--
		e += w
	}
	return idx, e
}

// SlidingState is the state of a sliding-window counter: the index of the
// current window and the cost counted in it and in the one before. A new
// counter's state is {Index: math.MinInt64} (the zero value also works for
// any time after the Unix epoch).
type SlidingState struct {
	Index      int64
	Prev, Curr int64
}

// u128 is an unsigned 128-bit number, for exact products.
type u128 struct{ hi, lo uint64 }

func mul(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

func (a u128) add(b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	return u128{a.hi + b.hi + c, lo}
}

func (a u128) sub(b u128) u128 {
	lo, c := bits.Sub64(a.lo, b.lo, 0)
	return u128{a.hi - b.hi - c, lo}
}

func (a u128) le(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo <= b.lo) }

// div returns floor(a / d); the quotient must fit 64 bits.
func (a u128) div(d int64) int64 {
	q, _ := bits.Div64(a.hi, a.lo, uint64(d))
	return int64(q)
}

// advance moves s to the window of now, returning the state and the ns
// elapsed in the window. A time before s's window counts as its start.
func (l Limit) advance(s SlidingState, now int64) (SlidingState, int64) {
	idx, e := l.split(now)
	switch {
	case idx < s.Index:
		return s, 0
	case idx == s.Index:
		return s, e
	case idx == s.Index+1:
		return SlidingState{Index: idx, Prev: s.Curr}, e
	default:
		return SlidingState{Index: idx}, e
	}
}

// Sliding is the pure sliding-window transition: given state s, the time
// now in ns since the Unix epoch and a cost (0 <= cost <= Limit, checked by
// the caller), it returns the new state and the decision. The request is
// admitted when Prev*(1 - e/W) + Curr + cost <= Limit, computed exactly.
// A refused request (and cost 0) leaves the counts unchanged.
func (l Limit) Sliding(s SlidingState, now, cost int64) (SlidingState, sluice.Decision) {
	w, n := int64(l.Window), l.Limit
	s, e := l.advance(s, now)
	// All quantities are scaled by W: estimate*W = Prev*(W-e) + Curr*W.
	prevPart := mul(s.Prev, w-e)
	limit := mul(n, w)
	var dec sluice.Decision
	if prevPart.add(mul(s.Curr+cost, w)).le(limit) {
		s.Curr += cost
		dec.Allowed = true
	} else {
		dec.RetryAfter = l.slidingWait(s, e, cost)
	}
	if used := prevPart.add(mul(s.Curr, w)); used.le(limit) {
		dec.Remaining = limit.sub(used).div(w)
	}
	switch {
	case s.Curr > 0:
		dec.ResetAfter = time.Duration(2*w - e)
	case s.Prev > 0:
		dec.ResetAfter = time.Duration(w - e)
	}
	return s, dec
}

// slidingWait returns the exact least wait after which cost is admitted.
func (l Limit) slidingWait(s SlidingState, e, cost int64) time.Duration {
	w, n := int64(l.Window), l.Limit
	if s.Curr+cost <= n {
		// Within this window, once Prev*(W-e') <= (N-Curr-cost)*W.
		e2 := w - mul(n-s.Curr-cost, w).div(s.Prev)
		return time.Duration(e2 - e)
	}
	// Next window: Prev' = Curr, Curr' = 0; need Curr*(W-e') <= (N-cost)*W.
	e2 := w - mul(n-cost, w).div(s.Curr)
	return time.Duration(w - e + e2)
}

// FixedState is the state of a fixed-window counter.
type FixedState struct {
	Index int64
	Count int64
}

// Fixed is the pure fixed-window transition: the count resets at each
// window boundary, and a request is admitted when Count + cost <= Limit.
func (l Limit) Fixed(s FixedState, now, cost int64) (FixedState, sluice.Decision) {
	idx, e := l.split(now)
	switch {
	case idx < s.Index:
		e = 0
	case idx > s.Index:
		s = FixedState{Index: idx}
	}
	w := int64(l.Window)
	var dec sluice.Decision
	if s.Count+cost <= l.Limit {
		s.Count += cost
		dec.Allowed = true
	} else {
		dec.RetryAfter = time.Duration(w - e)
	}
	dec.Remaining = max(l.Limit-s.Count, 0) // a settled charge can overdraw the window
	if s.Count > 0 {
		dec.ResetAfter = time.Duration(w - e)
	}
	return s, dec
}

// Option configures NewSliding and NewFixed.
type Option func(*config)

type config struct{ clock sluice.Clock }

// WithClock makes the counter read time from c instead of time.Now.
func WithClock(c sluice.Clock) Option { return func(o *config) { o.clock = c } }

type counter struct {
	mu    sync.Mutex
	l     Limit
	clock sluice.Clock
	seen  int64
}

func (c *counter) init(l Limit, opts []Option) error {
	if err := l.Validate(); err != nil {
		return err
	}
	cfg := config{clock: sluice.SystemClock{}}
	for _, o := range opts {
		o(&cfg)
	}
	c.l, c.clock, c.seen = l, cfg.clock, math.MinInt64
	return nil
}

// at returns now in ns since the Unix epoch, never earlier than the latest
// time seen; c.mu must be held.
func (c *counter) at(now time.Time) int64 {
	c.seen = max(c.seen, now.UnixNano())
	return c.seen
}

// Sliding is a sliding-window counter, safe for concurrent use.
type Sliding struct {
	counter
	st SlidingState
}

// NewSliding returns a sliding-window counter for l. An invalid l returns an
// error matching sluice.ErrInvalidLimit.
func NewSliding(l Limit, opts ...Option) (*Sliding, error) {
	s := &Sliding{st: SlidingState{Index: math.MinInt64}}
	if err := s.init(l, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// Allow admits cost now or not at all (see Limit.Sliding). Cost 0 peeks.
// Cost errors match sluice.ErrInvalidCost or sluice.ErrCostExceedsCapacity.
func (s *Sliding) Allow(cost int64) (sluice.Decision, error) {
	return s.AllowAt(s.clock.Now(), cost)
}

// AllowAt is Allow at time now.
func (s *Sliding) AllowAt(now time.Time, cost int64) (sluice.Decision, error) {
	if err := s.l.CheckCost(cost); err != nil {
		return sluice.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var d sluice.Decision
	s.st, d = s.l.Sliding(s.st, s.at(now), cost)
	return d, nil
}

// Fixed is a fixed-window counter, safe for concurrent use. It admits up to
// twice its limit across a window boundary; it is kept as a baseline.
type Fixed struct {
	counter
	st FixedState
}

// NewFixed returns a fixed-window counter for l. An invalid l returns an
// error matching sluice.ErrInvalidLimit.
func NewFixed(l Limit, opts ...Option) (*Fixed, error) {
	f := &Fixed{st: FixedState{Index: math.MinInt64}}
	if err := f.init(l, opts); err != nil {
		return nil, err
	}
	return f, nil
}

// Allow admits cost now or not at all (see Limit.Fixed). Cost 0 peeks.
func (f *Fixed) Allow(cost int64) (sluice.Decision, error) {
	return f.AllowAt(f.clock.Now(), cost)
}

// AllowAt is Allow at time now.
func (f *Fixed) AllowAt(now time.Time, cost int64) (sluice.Decision, error) {
	if err := f.l.CheckCost(cost); err != nil {
		return sluice.Decision{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var d sluice.Decision
	f.st, d = f.l.Fixed(f.st, f.at(now), cost)
	return d, nil
}
