// PolicyService: Envoy's RateLimitService decided by a sluice policy (limiter.CheckMany).

package envoyrls

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/book"
)

// PolicyService implements rls.RateLimitServiceServer with a sluice
// policy: each descriptor's entries become the descriptors of one limiter
// request (plus "domain": the request's domain), and all of a call's
// descriptors are decided as one (limiter.CheckMany): over limit on one
// consumes nothing on the others. The RateLimitService has no release, so
// a max_in_flight slot taken here is held until its lease_ttl ends.
//
// A descriptor's own limit (RateLimitDescriptor.limit, Envoy's per-request
// override) decides that descriptor's request as in Service: a token
// bucket of requests_per_unit per unit replaces the parameters (and
// overrides) of every policy limit that applies to it, in-flight caps
// aside (limiter.Request.Spec), each distinct limit compiled once and at
// most MaxOverrideLimits of them; 0 requests per unit refuses the
// descriptor, and the whole call takes nothing.
//
// A policy limit with envoy_settle reserves and settles through the
// service, given a book (SetSettleBook; settle.go): the entry named by its
// by carries the request's id and is never part of a key.
type PolicyService struct {
	rls.UnimplementedRateLimitServiceServer
	l    *limiter.Limiter
	ov   overrides
	book book.Book // where envoy_settle bookings live (settle.go); nil: none
}

// PriorityEntry is the descriptor entry that names a request's priority
// class (limiter.Request.Priority) when the policy has priorities: it is
// not a descriptor, never part of a key. A call's descriptors must name
// one class (or none: default_priority); an unknown class, or two, is
// INVALID_ARGUMENT. Under a policy with no priorities it is a descriptor
// like any other, as before classes.
const PriorityEntry = "priority"

// NewPolicyService serves l's policy.
func NewPolicyService(l *limiter.Limiter) *PolicyService { return &PolicyService{l: l} }

// ShouldRateLimit implements the RateLimitService.
func (s *PolicyService) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	if len(req.GetDescriptors()) > MaxDescriptors {
		return nil, grpcError(answer.Errorf(answer.BadRequest, "%d descriptors, more than %d", len(req.GetDescriptors()), MaxDescriptors))
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	reqs := make([]limiter.Request, len(req.GetDescriptors()))
	classes := len(s.l.Policy().Priorities) > 0
	own := make([]*Limit, len(reqs)) // each descriptor's own limit, if any
	zero := false                    // one of them is 0 per unit: refused, nothing taken
	bys := s.l.Policy().SettleBy()   // envoy_settle's id entries (never part of a key)
	var ids settleIDs
	for i, d := range req.GetDescriptors() {
		if err := checkEntries(i, d.GetEntries()); err != nil {
			return nil, err
		}
		desc := map[string]string{"domain": req.GetDomain()}
		lr := limiter.Request{Descriptors: desc, Cost: hits}
		for _, e := range d.GetEntries() {
			if e.GetKey() == PriorityEntry && classes {
				lr.Priority = e.GetValue() // (the class, never part of a key)
				continue
			}
			if len(bys) > 0 {
				if ok, err := ids.settleEntry(bys, i, len(reqs), e.GetKey(), e.GetValue()); err != nil {
					return nil, err
				} else if ok {
					continue
				}
			}
			desc[e.GetKey()] = e.GetValue()
		}
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt32 {
				return nil, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: hits_addend %d too large", i, h.GetValue()))
			}
			if lr.Cost = int64(h.GetValue()); lr.Cost == 0 {
				lr.Peek = true
			}
		}
		if o := d.GetLimit(); o != nil {
			ol, err := s.ov.limit(i, o)
			if err != nil {
				return nil, err
			}
			own[i], lr.Spec = ol, ol.spec
			zero = zero || ol.spec == nil
		}
		reqs[i] = lr
	}
	bk, settled, err := s.settleBegin(ctx, req, reqs, &ids)
	if settled != nil || err != nil {
		return settled, err
	}
	if zero {
		for i := range reqs {
			reqs[i].Peek = true
		}
	}
	res, err := s.l.CheckMany(ctx, reqs)
	bk.finish(ctx, res, err)
	var ce *limiter.CostError
	switch {
	case errors.As(err, &ce):
		// It can never be admitted: over limit, and nothing was taken.
		resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OVER_LIMIT}
		var rpu uint32
		unit := rls.RateLimitResponse_RateLimit_UNKNOWN
		if l := s.l.Policy().Limit(ce.Limit); l != nil {
			rpu, unit = limitUnit(l.Bucket.Rate, l.Capacity(), l.Quota.Period.String())
		}
		for _, ol := range own {
			if ol != nil && ol.spec != nil && ol.spec.Capacity() == ce.Capacity {
				rpu, unit = ol.RequestsPerUnit, ol.Unit
				break
			}
		}
		for range reqs {
			resp.Statuses = append(resp.Statuses, &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OVER_LIMIT,
				CurrentLimit: &rls.RateLimitResponse_RateLimit{Name: ce.Limit, RequestsPerUnit: rpu, Unit: unit}})
		}
		return resp, nil
	case err != nil:
		return nil, grpcError(answer.Classify(err))
	}
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK}
	if !res.Allowed {
		resp.OverallCode = rls.RateLimitResponse_OVER_LIMIT
	}
	var all []answer.Limit
	for k, r := range res.Results {
		if ol := own[k]; ol != nil && ol.spec == nil {
			resp.OverallCode = rls.RateLimitResponse_OVER_LIMIT
			resp.Statuses = append(resp.Statuses, &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OVER_LIMIT,
				CurrentLimit: &rls.RateLimitResponse_RateLimit{RequestsPerUnit: 0, Unit: ol.Unit}})
			continue
		}
		st := &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
		if !r.Allowed {
			st.Code = rls.RateLimitResponse_OVER_LIMIT
		}
		from := len(all)
		all = answer.FromResult(all, r)
		if i := answer.Tightest(all[from:]); i >= 0 {
			b, lim := r.Limits[i], all[from+i]
			rpu, unit := limitUnit(b.RefillPerSecond, b.Capacity, b.Period)
			st.CurrentLimit = &rls.RateLimitResponse_RateLimit{Name: b.Name, RequestsPerUnit: rpu, Unit: unit}
			st.LimitRemaining = uint32(min(max(lim.Remaining, 0), math.MaxUint32))
			wait := lim.ResetAfter
			if !lim.Allowed {
				wait = lim.RetryAfter
			}
			st.DurationUntilReset = durationpb.New(wait)
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if h := answer.HeadersOf(all, true, 0); h.Policy != "" {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: h.Policy}, {Key: "RateLimit", Value: h.RateLimit}}
	}
	return resp, nil
}

// limitUnit is a limit's current_limit: a calendar quota (a status with a
// Period) is its limit per Envoy's unit of its period (DAY, WEEK, MONTH,
// YEAR); any other limit its refill rate (RateUnit).
func limitUnit(perSecond float64, capacity int64, period string) (uint32, rls.RateLimitResponse_RateLimit_Unit) {
	if u, ok := quotaUnits[period]; ok {
		return uint32(min(max(capacity, 0), math.MaxUint32)), u
	}
	return RateUnit(perSecond)
}

// quotaUnits are Envoy's units of the calendar periods.
var quotaUnits = map[string]rls.RateLimitResponse_RateLimit_Unit{
	"day": rls.RateLimitResponse_RateLimit_DAY, "week": rls.RateLimitResponse_RateLimit_WEEK,
	"month": rls.RateLimitResponse_RateLimit_MONTH, "year": rls.RateLimitResponse_RateLimit_YEAR,
}

// envoyUnits are the units RateUnit chooses from, smallest first.
var envoyUnits = [...]struct {
	secs int64
	unit rls.RateLimitResponse_RateLimit_Unit
}{{1, rls.RateLimitResponse_RateLimit_SECOND}, {60, rls.RateLimitResponse_RateLimit_MINUTE},
	{3600, rls.RateLimitResponse_RateLimit_HOUR}, {86400, rls.RateLimitResponse_RateLimit_DAY}}

// RateUnit states a refill rate (tokens per second) as Envoy's
// current_limit does, requests_per_unit per unit: in the smallest of
// SECOND, MINUTE, HOUR and DAY in which the rate is a whole number of
// requests (20/s is 20 per SECOND, 0.5/s 30 per MINUTE, 1/3600 per s 1 per
// HOUR); when none makes it whole, per DAY rounded down, so that it never
// states more than the real rate (capped at the largest uint32). A rate
// written as N per period is taken exactly (bucket.Limit.RatePer). A rate
// <= 0 (a window or in-flight limit) is 0 per UNKNOWN.
func RateUnit(perSecond float64) (uint32, rls.RateLimitResponse_RateLimit_Unit) {
	if !(perSecond > 0) || math.IsInf(perSecond, 0) {
		return 0, rls.RateLimitResponse_RateLimit_UNKNOWN
	}
	if n, per, ok := (bucket.Limit{Capacity: 1, Rate: perSecond}).RatePer(); ok {
		// n per `per` exactly: whole in unit u when per divides n*u.
		for _, u := range envoyUnits {
			hi, lo := bits.Mul64(uint64(n), uint64(u.secs)*uint64(time.Second))
			var q, r uint64
			if hi < uint64(per) {
				q, r = bits.Div64(hi, lo, uint64(per))
			}
			switch {
			case hi >= uint64(per) || q > math.MaxUint32:
				return math.MaxUint32, u.unit // more than a uint32 says: the most it can
			case r == 0 && q >= 1, u.secs == 86400:
				return uint32(q), u.unit
			}
		}
	}
	for _, u := range envoyUnits {
		x := perSecond * float64(u.secs)
		switch {
		case x >= math.MaxUint32:
			return math.MaxUint32, u.unit
		case x >= 1 && x == math.Trunc(x), u.secs == 86400:
			return uint32(math.Floor(x)), u.unit
		}
	}
	return 0, rls.RateLimitResponse_RateLimit_UNKNOWN // not reached: DAY always answers
}
