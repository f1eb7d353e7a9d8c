// Fair shares between tenants in the kind table: the pure, exact rule every
// store applies to a token bucket whose Spec has a FairShare (which holder
// a request counts for, when its bucket is contended, and how far ahead of
// now a holder's virtual time may run), docs/behaviour.md "Fair shares".

package store

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// FairShare, on a token-bucket Spec, divides the refill between tenants
// while the bucket is contended (docs/behaviour.md "Fair shares").
type FairShare struct {
	// ActiveWindow > 0: a tenant is active if it asked within this window.
	ActiveWindow time.Duration
	// MaxTenants > 0 (policy default 10,000): tenants tracked per key; the
	// rest share one "other" share (OtherHolder).
	MaxTenants int
}

// OtherHolder is the share holder of items with no tenant, and of tenants
// beyond a key's MaxTenants: one share, weight 1, always admitted to the
// tenant set (which so holds at most MaxTenants+1 holders).
const OtherHolder = ""

// ShareSep separates a class from a tenant in a share holder's name
// (ShareHolder).
const ShareSep = "\x1f"

// ShareHolder is the share holder of a request of class (its name, "" for
// none) and tenant (a client's value, not ""): "<class>\x1f<tenant>" with
// a class, so that shares apply within a class; with none, the tenant
// itself, or "\x1f<tenant>" when it holds ShareSep. A class's name never
// holds ShareSep nor is empty, so no tenant's value, with a class or
// without, names another class's or tenant's holder. The limiter and the
// shared gate name holders by it alike.
func ShareHolder(class, tenant string) string {
	switch {
	case class != "":
		return class + ShareSep + tenant
	case strings.Contains(tenant, ShareSep):
		return ShareSep + tenant
	}
	return tenant
}

// DefaultMaxTenants is the policy's max_tenants when none is written.
const DefaultMaxTenants = 10_000

// MaxShareTenants is the largest MaxTenants (so that the sum of a set's
// weights, each below 2^32, fits a uint64).
const MaxShareTenants = 1 << 24

// MaxShareInc bounds a share's increment and allowance in ns (about 146
// years): a larger exact value counts as this, in every store.
const MaxShareInc = 1 << 62

// Shares reports whether limits of kind k can have a FairShare: token
// buckets (a share is a part of a refill rate).
func (k Kind) Shares() bool { return k == TokenBucket }

// On reports whether f is set (a limit with a fair share): ActiveWindow > 0.
func (f FairShare) On() bool { return f.ActiveWindow > 0 }

// check validates f for a limit of kind k (the zero FairShare, none, is
// valid for every kind); the error matches sluice.ErrInvalidLimit.
func (f FairShare) check(k Kind) error {
	switch {
	case f == FairShare{}:
		return nil
	case !k.Shares():
		return sluice.Errorf(sluice.ErrInvalidLimit, "fair_share applies to token_bucket limits only, not %s", k)
	case f.ActiveWindow <= 0:
		return sluice.Errorf(sluice.ErrInvalidLimit, "fair_share active_window %v must be positive", f.ActiveWindow)
	case f.MaxTenants < 1 || f.MaxTenants > MaxShareTenants:
		return sluice.Errorf(sluice.ErrInvalidLimit, "fair_share max_tenants %d must be within 1..%d", f.MaxTenants, MaxShareTenants)
	}
	return nil
}

// Tag names f's parameters ("fs<active_window ns>.<max_tenants>", base
// 36): a store that compiles a spec's parameters once per tag (Redis's
// script) appends it, so that a changed fair_share is a changed spec. A
// bucket's StateTag does not include it: the bucket's state, and the tenant
// set (times in ns), read the same under any fair_share, so a change keeps
// both (and hands out no burst).
func (f *FairShare) Tag() string {
	if f == nil {
		return ""
	}
	return "fs" + strconv.FormatInt(int64(f.ActiveWindow), 36) + "." + strconv.FormatInt(int64(f.MaxTenants), 36)
}

// ShareWeight is a holder's weight as the rule counts it: w, or 1 for 0.
func ShareWeight(w uint32) uint32 { return max(w, 1) }

// Expired reports whether a holder last seen at lastSeen (ns, the store's
// time base) is no longer active at now: lastSeen <= now - ActiveWindow.
func (f *FairShare) Expired(lastSeen, now int64) bool {
	return lastSeen <= now-int64(f.ActiveWindow)
}

// Holder is the holder a request of holder h counts for, in a key's
// tenant set that holds n holders (h among them when present): h itself,
// unless h is new and the set is full (n >= MaxTenants), when it is
// OtherHolder, whose weight is then 1 (HolderWeight).
func (f *FairShare) Holder(h string, present bool, n int) string {
	if present || h == OtherHolder || n < f.MaxTenants {
		return h
	}
	return OtherHolder
}

// HolderWeight is the weight the rule gives holder h asked with weight w
// (after Holder): ShareWeight(w), except that a tenant folded into
// OtherHolder counts 1 (folded: Holder returned OtherHolder for a holder
// that is not it).
func HolderWeight(w uint32, folded bool) uint32 {
	if folded {
		return 1
	}
	return ShareWeight(w)
}

// SetTTL is how long a key's tenant set is kept after its last write: the
// longer of the bucket's ttl and ActiveWindow.
func (f *FairShare) SetTTL(bucketTTL time.Duration) time.Duration {
	return max(bucketTTL, f.ActiveWindow)
}

// ShareOutcome is a fair-share item's decision (Spec.DecideShare).
type ShareOutcome struct {
	// State, Decision and Wait are the item's as Step, StepReserved, Book
	// or BookReserved give them, or a share refusal's: refused, nothing
	// taken (State unchanged), Remaining and ResetAfter what the bucket
	// shows, RetryAfter when the share admits the cost again.
	State    State
	Decision sluice.Decision
	Wait     time.Duration
	// VTAT is the holder's virtual time to write if the whole request is
	// admitted: the new one when Contended and admitted, else the one given.
	VTAT int64
	// Contended reports that the bucket held fewer than half its capacity
	// (in the class's view) before the request, so the share applied.
	Contended bool
	// ShareRefused reports that the bucket alone would have admitted the
	// item and its holder's share refused it (such a refusal starts no
	// penalty box).
	ShareRefused bool
}

// Contended reports whether a token bucket in state st (exists: the key
// has one) holds fewer than half its capacity at now, in the view of a
// class with reserve ppm (Item.Reserve): exactly, in the bucket's units,
// held < floor(C/2)·Unit, where held = CapacityUnits − max(0, tat − V(now))
// (V rounded down, as Step reads it) and C = floor(CapacityUnits/Unit),
// the whole tokens of the capacity (an odd capacity's half rounds down),
// both of the view. A new or full bucket is not contended.
func (s *Spec) Contended(st State, exists bool, now Now, ppm uint32) bool {
	p := s.Bucket.Reserved(ppm)
	t, o, ph := st.tat()
	tat, origin, phase := BucketState(&s.Bucket, t, o, ph, exists, now.Mono)
	v := p.Units(bucket.Instant{Elapsed: now.Mono - origin, Phase: phase})
	c, u := p.CapacityUnits(), p.Unit()
	return c-max(0, tat-v) < c/u/2*u
}

// HalfTau is τ/2 in ns for the view of a class with reserve ppm: floor of
// half of floor(CapacityUnits·Den/Num), the time its capacity takes to
// refill (Num/Den the bucket's exact rate in units per ns), at most
// MaxShareInc.
func (s *Spec) HalfTau(ppm uint32) int64 {
	p := s.Bucket.Reserved(ppm)
	num, den, _ := p.Ratio()
	hi, lo := bits.Mul64(uint64(p.CapacityUnits()), den)
	if hi >= num {
		return MaxShareInc
	}
	q, _ := bits.Div64(hi, lo, num)
	return int64(min(q/2, MaxShareInc))
}

// ShareInc is the virtual time a cost takes of a holder of weight w in a
// set whose weights sum to sumW (w included): the time the bucket takes to
// refill cost at the share w/sumW of its rate, rounded up to the ns,
// exactly: ceil(cost·Unit·Den·sumW / (Num·w)) (the bucket refilling Num
// units per Den ns, Unit units a token); at most MaxShareInc. w 0 counts
// as 1; sumW below w counts as w.
func (s *Spec) ShareInc(cost int64, sumW uint64, w uint32) int64 {
	if cost <= 0 {
		return 0
	}
	ww := uint64(ShareWeight(w))
	sumW = max(sumW, ww)
	num, den, _ := s.Bucket.Ratio()
	// X = cost·Unit·Den/Num = q1 + r1/Num, the cost's refill time.
	hi, lo := bits.Mul64(uint64(cost)*uint64(s.Bucket.Unit()), den)
	if hi >= num {
		return MaxShareInc
	}
	q1, r1 := bits.Div64(hi, lo, num)
	// X·sumW = q1·sumW + r1·sumW/Num = S + r2/Num, S = q1·sumW + q2.
	qh, ql := bits.Mul64(q1, sumW)
	rh, rl := bits.Mul64(r1, sumW)
	q2, r2 := bits.Div64(rh, rl, num) // (r1 < Num: q2 < sumW)
	var c uint64
	ql, c = bits.Add64(ql, q2, 0)
	qh += c
	// inc = ceil(X·sumW/w) = floor(S/w) + (1 if S mod w or r2 is not 0).
	if qh >= ww {
		return MaxShareInc
	}
	q3, r3 := bits.Div64(qh, ql, ww)
	if r3 != 0 || r2 != 0 {
		q3++
	}
	return int64(min(q3, MaxShareInc))
}

// DecideShare decides a fair-share item (s.FairShare set, cost > 0) of a
// holder whose virtual time is vtat, weight w, in a set whose weights sum
// to sumW (after the request's touch: Holder, HolderWeight), on bucket
// state st at now, for a class of reserve ppm, booking within maxWait when
// positive:
//
//   - not Contended: the bucket alone decides (StepReserved, or
//     BookReserved with a maxWait); vtat is kept;
//   - Contended: inc = ShareInc, nvt = max(vtat, now) + inc, allowance =
//     max(HalfTau, inc); admitted only if the bucket admits and
//     nvt − now <= allowance (+ maxWait when booking), with VTAT nvt and
//     Wait max(the bucket's, nvt − allowance − now); when the bucket
//     admits and the share does not, refused (ShareRefused) with the
//     bucket's peek (Remaining, ResetAfter) and RetryAfter nvt −
//     allowance − now. A refusal by the bucket is its own decision.
//
// Sums saturate (nvt at math.MaxInt64). A peek (cost 0) is the bucket's
// alone and reads no share.
func (s *Spec) DecideShare(st State, exists bool, now Now, cost int64, maxWait time.Duration, ppm uint32, vtat int64, w uint32, sumW uint64) ShareOutcome {
	out := ShareOutcome{VTAT: vtat}
	if cost > 0 {
		out.Contended = s.Contended(st, exists, now, ppm)
	}
	if maxWait > 0 && cost > 0 {
		out.State, out.Decision, out.Wait = s.BookReserved(st, exists, now, cost, maxWait, ppm)
	} else {
		out.State, out.Decision = s.StepReserved(st, exists, now, cost, ppm)
	}
	if !out.Contended || !out.Decision.Allowed {
		return out
	}
	inc := s.ShareInc(cost, sumW, w)
	allowance := max(s.HalfTau(ppm), inc)
	nvt := addSat(max(vtat, now.Mono), inc)
	ahead := subSat(nvt, now.Mono)
	limit := allowance
	if maxWait > 0 {
		limit = addSat(limit, int64(maxWait))
	}
	if ahead <= limit {
		out.VTAT = nvt
		out.Wait = max(out.Wait, time.Duration(ahead-allowance))
		return out
	}
	_, peek := s.StepReserved(st, exists, now, 0, ppm)
	out.State, out.Wait, out.ShareRefused = st, 0, true
	out.Decision = sluice.Decision{Remaining: peek.Remaining, ResetAfter: peek.ResetAfter, RetryAfter: time.Duration(ahead - allowance)}
	return out
}

// addSat is a + b (b >= 0), at most math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// subSat is a − b (a >= b), at most math.MaxInt64.
func subSat(a, b int64) int64 {
	if b < 0 && a > math.MaxInt64+b {
		return math.MaxInt64
	}
	return a - b
}
