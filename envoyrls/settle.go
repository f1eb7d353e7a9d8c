// envoy_settle in the policy mode: Envoy's request-path call books its
// limits' estimates under the request's id, and its stream-done call
// (apply_on_stream_done) with the same id settles them to the tokens used.

package envoyrls

import (
	"context"
	"errors"
	"strings"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/book"
)

// SetSettleBook gives the policy mode the book where envoy_settle
// bookings live (the book's IdempotencyWindow and ReceiptWindow are how
// long a booking is kept: sluice serve gives both its --lease-window). A
// Redis book makes a booking visible to every instance sharing the store,
// so that the stream-done call may reach another instance than the
// request path's. Without a book (nil, the default), envoy_settle limits
// are charged as any, call by call; their by entry is still never part of
// a key. Call it before serving.
func (s *PolicyService) SetSettleBook(b book.Book) { s.book = b }

// Booking answers kept under a call's id in the book (after Begin): a
// receipt record's id, or the mark of a refused request path.
const (
	bookedTag = "r:"
	refusedAn = "-"
)

// settleIDs is what a call's descriptors say of envoy_settle: per
// descriptor, the by key it carried (""), and the call's id.
type settleIDs struct {
	by []string
	id string
}

// settleEntry reports whether a descriptor entry is an envoy_settle by
// entry of the policy (bys: policy.SettleBy), recording its value; two
// different ids in one call are INVALID_ARGUMENT.
func (ids *settleIDs) settleEntry(bys []string, i, n int, key, value string) (bool, error) {
	found := false
	for _, b := range bys {
		found = found || b == key
	}
	if !found {
		return false, nil
	}
	if ids.by == nil {
		ids.by = make([]string, n)
	}
	switch {
	case value == "":
		return false, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: empty %s (the request's id for envoy_settle)", i, key))
	case ids.id != "" && ids.id != value:
		return false, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: %s %.64q differs from the call's other id %.64q", i, key, value, ids.id))
	}
	ids.id, ids.by[i] = value, key
	return true, nil
}

// unbooked is what a call does when the book cannot claim its id (Begin's
// error: a store refusing writes, such as Redis at maxmemory, or failing):
// the call is decided as one without envoy_settle (nil), a request path
// then booking nothing and a stream-done call charging its hits_addend,
// rather than answered UNAVAILABLE (which Envoy, failing open by default,
// would take as no limit, and a stream-done call's usage never charged).
// A caller that left gets its error.
func unbooked(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		p := answer.Classify(err)
		p.Msg = "book: " + p.Msg
		return grpcError(p)
	}
	return nil
}

// booking is a request-path call's claim of its id in the book; finish
// records what the call booked.
type booking struct {
	s   *PolicyService
	key string
}

const bookingFP = "envoy_settle"

// settleBegin claims the call's id. A first call for it (the request
// path) gets its reqs rewritten to book: every envoy_settle limit whose by
// entry the descriptor carries takes max(estimate, the descriptor's
// hits_addend), the descriptor's other limits its hits_addend, and a
// receipt is asked for; the caller decides them and calls finish. A call
// for a booked id (the stream-done call) settles the booking to its
// hits_addend and is answered here (resp). A call for an id whose
// request path was refused, whose booking is gone (settled, expired,
// dropped), or that the book cannot claim (unbooked), is decided as any
// call (nil, nil, nil).
func (s *PolicyService) settleBegin(ctx context.Context, req *rls.RateLimitRequest, reqs []limiter.Request, ids *settleIDs) (*booking, *rls.RateLimitResponse, error) {
	if s.book == nil || ids.id == "" {
		return nil, nil, nil
	}
	p := s.l.Policy()
	costs := make([]map[string]int64, len(reqs)) // per descriptor carrying the id: what each limit takes
	booked := false
	for i := range reqs {
		if ids.by[i] == "" {
			continue
		}
		r := &reqs[i]
		hits := r.Cost
		if r.Peek {
			hits = 0
		}
		costs[i] = map[string]int64{}
		for _, l := range p.Limits {
			if l.Kind.HoldsSlots() {
				continue // (an in-flight cap takes its slot whatever the cost)
			}
			if _, ok := l.AppendKey(nil, r.Descriptors); !ok {
				continue
			}
			costs[i][l.Name] = hits
			if es := l.EnvoySettle; es != nil && es.By == ids.by[i] {
				costs[i][l.Name], booked = max(es.Estimate, hits), true
			}
		}
	}
	if !booked {
		return nil, nil, nil // no envoy_settle limit applies: nothing to book or settle
	}
	key := "envoy_settle|" + string(envoyEsc.Append(nil, req.GetDomain())) + "|" + ids.id
	ans, owner, err := s.book.Begin(ctx, key, bookingFP)
	if err != nil {
		return nil, nil, unbooked(ctx, err)
	}
	if !owner {
		rid, ok := strings.CutPrefix(string(ans), bookedTag)
		if !ok {
			return nil, nil, nil // refused, or not answered in time: charged as any call
		}
		resp, err := s.settle(ctx, p, rid, reqs, ids)
		if errors.Is(err, book.ErrSettled) || errors.Is(err, book.ErrUnknown) || errors.Is(err, book.ErrDropped) {
			return nil, nil, nil // no booking any more: charged as any call
		}
		return nil, resp, err
	}
	for i := range reqs {
		if costs[i] != nil {
			reqs[i].Costs, reqs[i].Receipt, reqs[i].Peek = costs[i], true, false // (the costs say what each limit takes)
		}
	}
	return &booking{s: s, key: key}, nil, nil
}

// finish records the request path's outcome under its id: the receipt of
// what an admitted call took (a record in the book), or the mark of a
// refusal (its stream-done call is then charged as any call); an error
// forgets the id. A receipt the book cannot keep leaves the estimates
// charged.
func (b *booking) finish(ctx context.Context, res limiter.ManyResult, err error) {
	if b == nil {
		return
	}
	var ce *limiter.CostError
	switch {
	case errors.As(err, &ce), err == nil && !res.Allowed:
		// (a cost above a capacity is answered OVER_LIMIT, nothing taken:
		// a refusal, not an error)
		b.s.book.Finish(ctx, b.key, bookingFP, []byte(refusedAn))
	case err != nil:
		b.s.book.Finish(ctx, b.key, bookingFP, nil)
	case res.Receipt.Empty():
		b.s.book.Finish(ctx, b.key, bookingFP, nil)
	default:
		raw, _ := res.Receipt.MarshalCompact()
		rid, err := b.s.book.AddRecord(ctx, book.Record{Receipt: raw})
		if err != nil {
			b.s.book.Finish(ctx, b.key, bookingFP, nil)
			return
		}
		b.s.book.Finish(ctx, b.key, bookingFP, []byte(bookedTag+rid))
	}
}

// settle settles receipt record rid: every envoy_settle limit it took
// from to the call's hits_addend (of the first descriptor that carries
// the id; 0 refunds the whole booking), exactly (a refund or a charge into
// debt), the receipt's other limits keeping what they took. The call takes
// nothing else and is answered OK.
func (s *PolicyService) settle(ctx context.Context, p *policy.Policy, rid string, reqs []limiter.Request, ids *settleIDs) (*rls.RateLimitResponse, error) {
	var used int64
	for i := range reqs {
		if ids.by[i] != "" {
			if used = reqs[i].Cost; reqs[i].Peek {
				used = 0
			}
			break
		}
	}
	var rec limiter.Receipt
	actuals := map[string]int64{}
	check := func(raw []byte) error {
		var err error
		if rec, err = s.l.UnmarshalReceipt(raw); err != nil {
			return err
		}
		for _, n := range rec.Limits() {
			if l := p.Limit(n); l != nil && l.EnvoySettle != nil {
				actuals[n] = used
			}
		}
		return nil
	}
	if _, err := s.book.TakeReceipt(ctx, rid, check); err != nil {
		if errors.Is(err, book.ErrSettled) || errors.Is(err, book.ErrUnknown) || errors.Is(err, book.ErrDropped) {
			return nil, err
		}
		p := answer.Classify(err)
		p.Msg = "book: " + p.Msg
		return nil, grpcError(p)
	}
	if err := s.l.SettleCosts(ctx, rec, limiter.KeepCost, actuals); err != nil {
		return nil, grpcError(answer.Classify(err))
	}
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: make([]*rls.RateLimitResponse_DescriptorStatus, len(reqs))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
	}
	return resp, nil
}
