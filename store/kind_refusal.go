// Refusals told later: for the kinds whose refusal stays a refusal until its
// RetryAfter, the decision a store would give a while after refusing (what a
// refusal cache, store/refusal, answers without asking the store).

package store

import (
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
)

// refuser is implemented by the algorithms of kinds whose refusals can be
// told later (Spec.RefusedAfter): their state only regains budget as time
// passes (or by a return, which the caller sees), and the decision a store
// would give is a function of the refusal and the time since.
type refuser interface {
	refusedAfter(sp *Spec, dec sluice.Decision, cost, later int64, elapsed time.Duration) (sluice.Decision, bool)
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
// which). A token bucket's figures are exact but for the nanosecond the
// store rounded its waits to.
func (s *Spec) RefusedAfter(dec sluice.Decision, cost, later int64, elapsed time.Duration) (sluice.Decision, bool) {
	r, ok := kinds[s.Kind].alg.(refuser)
	if !ok || s.BlockFor > 0 || dec.Allowed || elapsed < 0 || elapsed >= dec.RetryAfter || later < cost || cost <= 0 {
		return sluice.Decision{}, false
	}
	return r.refusedAfter(s, dec, cost, later, elapsed)
}

func (bucketKind) refusedAfter(sp *Spec, dec sluice.Decision, cost, later int64, elapsed time.Duration) (sluice.Decision, bool) {
	left := dec.RetryAfter - elapsed
	out := sluice.Decision{RetryAfter: left, ResetAfter: max(dec.ResetAfter-elapsed, 0)}
	p := &sp.Bucket
	num, den, _ := p.Ratio()
	tokens := func(d time.Duration) int64 { // whole tokens refilled in d, rounded up
		return int64(math.Ceil(float64(d) * float64(num) / (float64(den) * float64(p.Unit()))))
	}
	rem := cost - tokens(left)
	if r0 := dec.Remaining; r0 > 0 && cost-tokens(dec.RetryAfter) != r0 {
		// The store's rounding put a token's arrival on the other side of
		// a nanosecond: count the tokens arrived since from its figure.
		rem = r0 + tokens(dec.RetryAfter) - tokens(left)
	}
	out.Remaining = min(max(rem, dec.Remaining), cost-1)
	if later > cost {
		// The wait for later is the wait for cost and the time to refill
		// the difference (later-cost tokens: within the capacity's units).
		hi, lo := bits.Mul64(uint64((later-cost)*p.Unit()), den)
		if hi >= num {
			return sluice.Decision{}, false
		}
		q, r := bits.Div64(hi, lo, num)
		if r != 0 {
			q++
		}
		if q > uint64(math.MaxInt64-int64(left)) {
			return sluice.Decision{}, false
		}
		out.RetryAfter += time.Duration(q)
	}
	return out, true
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
