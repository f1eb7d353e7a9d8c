// Refusals told later: for the kinds whose refusal stays a refusal until its
// RetryAfter, the decision a store would give a while after refusing (what a
// refusal cache, store/refusal, answers without asking the store).

package store

import (
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// refuser is implemented by the algorithms of kinds whose refusals can be
// told later (Spec.RefusedAfter): their state only regains budget as time
// passes (or by a return, which the caller sees), and the decision a store
// would give is a function of the refusal and the time since.
type refuser interface {
	refusedAfter(sp *Spec, dec sluice.Decision, cost, later int64, elapsed time.Duration) (sluice.Decision, bool)
	// refusedNext: see Spec.RefusedNext (dec admitted, Remaining < cost).
	refusedNext(sp *Spec, dec sluice.Decision, cost int64) (sluice.Decision, bool)
}

// RefusalsHold reports whether a refusal of a request of cost c by a limit
// of kind k with RetryAfter R means that, unless budget is returned (a
// refund, a changed spec), no request of cost c or more is admitted before
// R has passed, and the decision the store would give meanwhile can be
// told from the refusal alone (Spec.RefusedAfter): token buckets, fixed
// windows and quotas. Not sliding windows (their remaining budget grows
// with the weight of the previous window, which a decision does not
// report) nor kinds that hold slots (a slot released elsewhere ends their
// refusal at once). False for a value that is no Kind constant.
func (k Kind) RefusalsHold() bool {
	if k >= numKinds {
		return false
	}
	_, ok := kinds[k].alg.(refuser)
	return ok
}

// RefusedAfter returns the decision a store would give for a request of
// cost later (at least cost) on a key, elapsed after it refused a request
// of cost there with dec, when nothing was returned to the key meanwhile
// and nothing else happened to it: refused, RetryAfter and ResetAfter
// counted down by elapsed, Remaining what the kind regains in that time
// (a token bucket's refill, below cost; a window's or a quota's the same
// until its end). ok is false when it cannot tell:
// the kind's refusals do not hold (Kind.RefusalsHold), elapsed is not
// before dec.RetryAfter (the refusal may have ended), later is below cost,
// or s has a penalty box (BlockFor: the refusal then reports the later of
// the block's end and what the kind alone would decide, which may turn
// from a refusal to an admission meanwhile, and the decision does not say
// which), or a token bucket's Remaining hangs on the nanosecond the store
// rounded its wait to (a token due within it). Else its figures are the
// store's, but for a token bucket whose token is not a whole number of
// nanoseconds, whose RetryAfter may be a nanosecond short of the store's:
// for a larger cost than the one refused (the wait for cost and the refill
// of the difference, rounded down), or after a refusal told by RefusedNext.
func (s *Spec) RefusedAfter(dec sluice.Decision, cost, later int64, elapsed time.Duration) (sluice.Decision, bool) {
	r, ok := kinds[s.Kind].alg.(refuser)
	if !ok || s.BlockFor > 0 || dec.Allowed || elapsed < 0 || elapsed >= dec.RetryAfter || later < cost || cost <= 0 {
		return sluice.Decision{}, false
	}
	return r.refusedAfter(s, dec, cost, later, elapsed)
}

// RefusedNext returns the refusal a store would give a request of cost on
// a key at the moment it admitted one of cost there with dec (the state's
// decision after the admission), when that is a refusal: the key has less
// than cost left (dec.Remaining < cost). ok is false when the next request
// would be admitted, or the kind's refusals do not hold (as for
// RefusedAfter, and under a penalty box). A token bucket's RetryAfter is
// derived from its ResetAfter (the wait for cost is the wait to full less
// the time to refill the capacity beyond cost): exact when that time is a
// whole number of nanoseconds (every rate whose token is a whole number of
// them: 1, 2, 4, 5, 10, 20, 25, 50, 100, 1000... a second, most rates a
// minute), else possibly a nanosecond short of the store's (which of its
// two possible values the store's own rounding gave is not in the
// decision; the earlier is told, so that a refusal is never held past the
// store's).
func (s *Spec) RefusedNext(dec sluice.Decision, cost int64) (sluice.Decision, bool) {
	r, ok := kinds[s.Kind].alg.(refuser)
	if !ok || s.BlockFor > 0 || !dec.Allowed || cost <= 0 || dec.Remaining >= cost || dec.ResetAfter <= 0 {
		return sluice.Decision{}, false
	}
	return r.refusedNext(s, dec, cost)
}

func (bucketKind) refusedNext(sp *Spec, dec sluice.Decision, cost int64) (sluice.Decision, bool) {
	k, whole, ok := refillNanos(&sp.Bucket, sp.Bucket.Limit().Capacity-cost)
	if !whole {
		k++ // (the store's wait is one of two: the earlier)
	}
	if !ok || k >= int64(dec.ResetAfter) {
		return sluice.Decision{}, false
	}
	return sluice.Decision{Remaining: dec.Remaining, RetryAfter: dec.ResetAfter - time.Duration(k), ResetAfter: dec.ResetAfter}, true
}

// refillNanos is the time p takes to refill n tokens (n·Unit·Den/Num ns),
// rounded down, whether it is a whole number of nanoseconds, and whether
// it fits.
func refillNanos(p *bucket.Params, n int64) (ns int64, whole, ok bool) {
	num, den, _ := p.Ratio()
	hi, lo := bits.Mul64(uint64(n*p.Unit()), den) // (n·Unit is within the capacity's units)
	if hi >= num {
		return 0, false, false
	}
	q, r := bits.Div64(hi, lo, num)
	return int64(q), r == 0, q < math.MaxInt64
}

func (fixedKind) refusedNext(_ *Spec, dec sluice.Decision, _ int64) (sluice.Decision, bool) {
	return sluice.Decision{Remaining: dec.Remaining, RetryAfter: dec.ResetAfter, ResetAfter: dec.ResetAfter}, true
}

func (quotaKind) refusedNext(_ *Spec, dec sluice.Decision, _ int64) (sluice.Decision, bool) {
	return sluice.Decision{Remaining: dec.Remaining, RetryAfter: dec.ResetAfter, ResetAfter: dec.ResetAfter}, true
}

func (bucketKind) refusedAfter(sp *Spec, dec sluice.Decision, cost, later int64, elapsed time.Duration) (sluice.Decision, bool) {
	p := &sp.Bucket
	left := dec.RetryAfter - elapsed
	out := sluice.Decision{RetryAfter: left, ResetAfter: max(dec.ResetAfter-elapsed, 0)}
	// The store counts whole tokens on nanoseconds: the token j before the
	// one that makes cost arrives at the first nanosecond past the real
	// moment D - j·τ (τ the time per token), where D, the real moment cost
	// is there, lies within the nanosecond before the deadline. Token j is
	// still missing when j·τ < left - δ for that fraction δ in [0, 1): for
	// every j with j·τ <= left-1, for none with j·τ >= left, and the store's
	// rounding alone tells for one with j·τ strictly between (then the
	// cache cannot, and says so).
	missing, ok := missingTokens(p, int64(left))
	if !ok {
		return sluice.Decision{}, false
	}
	out.Remaining = min(max(cost-missing, 0), cost-1)
	if later > cost {
		// The wait for later is the wait for cost and the refill of the
		// difference, when that is a whole number of nanoseconds.
		k, _, ok := refillNanos(p, later-cost) // (rounded down: see RefusedAfter)
		if !ok || k > math.MaxInt64-int64(left) {
			return sluice.Decision{}, false
		}
		out.RetryAfter += time.Duration(k)
	}
	return out, true
}

// missingTokens is the number of tokens (j = 0, 1, ...) missing from a
// bucket of p left ns before the real moment its refused cost is there
// rounded up to the nanosecond (see refusedAfter); ok false when the
// store's rounding alone decides it.
func missingTokens(p *bucket.Params, left int64) (int64, bool) {
	if left <= 0 {
		return 0, true
	}
	if tau, whole, ok := refillNanos(p, 1); whole && ok && tau > 0 {
		return (left-1)/tau + 1, true // (whole: no j·τ strictly between left-1 and left)
	}
	num, den, _ := p.Ratio()
	tau := float64(p.Unit()) * float64(den) / float64(num)
	m := math.Floor(float64(left-1)/tau) + 1 // the j with j·τ <= left-1, by floating point
	margin := 1e-3 + float64(left)*1e-12
	if (m-1)*tau > float64(left-1)-margin || m*tau < float64(left)+margin {
		return 0, false // a token within the nanosecond (or too close to tell)
	}
	return int64(m), true
}

// windowed is refusedAfter for the kinds whose refusal lasts until the
// window's (or the period's) end, whatever the cost: the budget left is
// the same until then.
func windowed(dec sluice.Decision, elapsed time.Duration) (sluice.Decision, bool) {
	return sluice.Decision{Remaining: dec.Remaining, RetryAfter: dec.RetryAfter - elapsed, ResetAfter: max(dec.ResetAfter-elapsed, 0)}, true
}

func (fixedKind) refusedAfter(_ *Spec, dec sluice.Decision, _, _ int64, elapsed time.Duration) (sluice.Decision, bool) {
	return windowed(dec, elapsed)
}

func (quotaKind) refusedAfter(_ *Spec, dec sluice.Decision, _, _ int64, elapsed time.Duration) (sluice.Decision, bool) {
	return windowed(dec, elapsed)
}
