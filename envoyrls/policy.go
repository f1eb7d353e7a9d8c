package envoyrls

import (
	"context"
	"errors"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/limiter"
)

// PolicyService implements rls.RateLimitServiceServer with a sluice
// policy: each descriptor's entries become the descriptors of one limiter
// request (plus "domain": the request's domain), and all of a call's
// descriptors are decided as one (limiter.CheckMany): over limit on one
// consumes nothing on the others. The RateLimitService has no release, so
// a max_in_flight slot taken here is held until its lease_ttl ends.
type PolicyService struct {
	rls.UnimplementedRateLimitServiceServer
	l *limiter.Limiter
}

// NewPolicyService serves l's policy.
func NewPolicyService(l *limiter.Limiter) *PolicyService { return &PolicyService{l: l} }

// ShouldRateLimit implements the RateLimitService.
func (s *PolicyService) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	if len(req.GetDescriptors()) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors, more than %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	reqs := make([]limiter.Request, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if err := checkEntries(i, d.GetEntries()); err != nil {
			return nil, err
		}
		desc := map[string]string{"domain": req.GetDomain()}
		for _, e := range d.GetEntries() {
			desc[e.GetKey()] = e.GetValue()
		}
		lr := limiter.Request{Descriptors: desc, Cost: hits}
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt32 {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: hits_addend %d too large", i, h.GetValue())
			}
			if lr.Cost = int64(h.GetValue()); lr.Cost == 0 {
				lr.Peek = true
			}
		}
		reqs[i] = lr
	}
	res, err := s.l.CheckMany(ctx, reqs)
	var ce *limiter.CostError
	switch {
	case errors.As(err, &ce):
		// It can never be admitted: over limit, and nothing was taken.
		resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OVER_LIMIT}
		for range reqs {
			resp.Statuses = append(resp.Statuses, &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OVER_LIMIT,
				CurrentLimit: &rls.RateLimitResponse_RateLimit{Name: ce.Limit, RequestsPerUnit: uint32(min(ce.Capacity, math.MaxUint32))}})
		}
		return resp, nil
	case errors.Is(err, sluice.ErrInvalidCost):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK}
	if !res.Allowed {
		resp.OverallCode = rls.RateLimitResponse_OVER_LIMIT
	}
	var worst limiter.Result
	for _, r := range res.Results {
		st := &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
		if !r.Allowed {
			st.Code = rls.RateLimitResponse_OVER_LIMIT
		}
		if b, ok := tightest(r); ok {
			st.CurrentLimit = &rls.RateLimitResponse_RateLimit{Name: b.Name, RequestsPerUnit: uint32(min(b.Capacity, math.MaxUint32)), Unit: unitOf(b)}
			st.LimitRemaining = uint32(min(max(b.TokensRemaining, 0), math.MaxUint32))
			wait := b.ResetAfter
			if !b.Allowed {
				wait = b.RetryAfter
			}
			st.DurationUntilReset = durationpb.New(wait)
		}
		resp.Statuses = append(resp.Statuses, st)
		worst.Limits = append(worst.Limits, r.Limits...)
	}
	if pol, rl, ok := httplimit.RateLimitHeaders(worst); ok {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: pol}, {Key: "RateLimit", Value: rl}}
	}
	return resp, nil
}

// tightest is a result's most constraining limit: a refused one with the
// longest wait, else the one with the least remaining relative to its
// capacity.
func tightest(r limiter.Result) (limiter.LimitStatus, bool) {
	best := -1
	for i, st := range r.Limits {
		if best < 0 {
			best = i
			continue
		}
		b := r.Limits[best]
		switch {
		case !st.Allowed && (b.Allowed || st.RetryAfter > b.RetryAfter):
			best = i
		case st.Allowed && b.Allowed && float64(st.TokensRemaining)/float64(st.Capacity) < float64(b.TokensRemaining)/float64(b.Capacity):
			best = i
		}
	}
	if best < 0 {
		return limiter.LimitStatus{}, false
	}
	return r.Limits[best], true
}

// unitOf is the Envoy unit closest to a limit's refill time (capacity /
// rate); Envoy's message has no field for an arbitrary rate, so
// requests_per_unit reports the capacity and unit this approximation.
func unitOf(st limiter.LimitStatus) rls.RateLimitResponse_RateLimit_Unit {
	if st.RefillPerSecond <= 0 {
		return rls.RateLimitResponse_RateLimit_UNKNOWN
	}
	fill := time.Duration(float64(st.Capacity) / st.RefillPerSecond * 1e9)
	switch {
	case fill <= 2*time.Second:
		return rls.RateLimitResponse_RateLimit_SECOND
	case fill <= 2*time.Minute:
		return rls.RateLimitResponse_RateLimit_MINUTE
	case fill <= 2*time.Hour:
		return rls.RateLimitResponse_RateLimit_HOUR
	default:
		return rls.RateLimitResponse_RateLimit_DAY
	}
}
