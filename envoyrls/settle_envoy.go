// envoy_settle in Envoy-config mode (Service, sluice ratelimit): the
// request-path call books its rate_limits' estimates under the request's
// id, the stream-done call with the same id settles them.

package envoyrls

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
)

// SetSettleBook gives the service the book where envoy_settle bookings
// live, as PolicyService.SetSettleBook. Without one, envoy_settle
// rate_limits are charged call by call; their by entries are still taken
// out of every call before matching. Call it before serving.
func (s *Service) SetSettleBook(b book.Book) { s.book = b }

// settleEntry takes an entry out of descriptor i's matching when its key
// is one of the domain's envoy_settle by keys, recording the call's id
// and the key on a; two different ids in one call are INVALID_ARGUMENT.
func (c *rlsCall) settleEntry(bys []string, i int, a *applied, e *ratelimitv3.RateLimitDescriptor_Entry) (bool, error) {
	found := false
	for _, b := range bys {
		found = found || b == e.GetKey()
	}
	if !found {
		return false, nil
	}
	switch v := e.GetValue(); {
	case v == "":
		return false, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: empty %s (the request's id for envoy_settle)", i, e.GetKey()))
	case c.settleID != "" && c.settleID != v:
		return false, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: %s %.64q differs from the call's other id %.64q", i, e.GetKey(), v, c.settleID))
	}
	c.settleID, a.by = e.GetValue(), e.GetKey()
	return true, nil
}

// settles reports whether descriptor a books and settles: its limit has
// envoy_settle by the entry a carried, and it is enforced (an item).
func (a *applied) settles() bool {
	return a.by != "" && a.node != nil && a.node.Limit.EnvoySettle != nil && a.node.Limit.EnvoySettle.By == a.by && !a.shade && !a.quota
}

// envoyBooking is a request-path call's claim of its id.
type envoyBooking struct {
	bk  book.Book
	key string
}

// bookedItem is one bucket a request path booked: its key, the cost it
// took and its RefundBefore (store.Item's).
type bookedItem struct {
	Key          string `json:"k"`
	Cost         int64  `json:"c"`
	RefundBefore int64  `json:"rb,omitempty"`
}

// settleBegin claims the call's id in the book (Service's counterpart of
// PolicyService.settleBegin). A first call for it (the request path): the
// bucket of every descriptor that settles takes max(estimate, its cost)
// and the caller decides and calls finish. A call for a booked id (the
// stream-done call) settles each booked bucket to what the call's
// descriptors of it say (their hits_addend, summed) and is answered OK
// here. Otherwise (unbooked included) the call is decided as any (nil,
// nil, nil).
func (s *Service) settleBegin(ctx context.Context, req *rls.RateLimitRequest, c *rlsCall) (*envoyBooking, *rls.RateLimitResponse, error) {
	if s.book == nil || c.settleID == "" {
		return nil, nil, nil
	}
	settles := false
	for i := range c.ds {
		settles = settles || c.ds[i].settles()
	}
	if !settles {
		return nil, nil, nil
	}
	key := "envoy_settle|" + string(envoyEsc.Append(nil, req.GetDomain())) + "|" + c.settleID
	ans, owner, err := s.book.Begin(ctx, key, bookingFP)
	if err != nil {
		return nil, nil, unbooked(ctx, err)
	}
	if !owner {
		rid, ok := strings.CutPrefix(string(ans), bookedTag)
		if !ok {
			return nil, nil, nil // refused, or not answered in time: charged as any call
		}
		resp, err := s.settleBooked(ctx, rid, c)
		if errors.Is(err, book.ErrSettled) || errors.Is(err, book.ErrUnknown) || errors.Is(err, book.ErrDropped) {
			return nil, nil, nil // no booking any more: charged as any call
		}
		return nil, resp, err
	}
	for i := range c.ds {
		a := &c.ds[i]
		if !a.settles() || a.item < 0 {
			continue
		}
		it := &c.items[a.item]
		if it.Cost = max(it.Cost, a.node.Limit.EnvoySettle.Estimate); it.Cost > it.Spec.Capacity() {
			a.over, c.overall = true, rls.RateLimitResponse_OVER_LIMIT
		}
	}
	return &envoyBooking{bk: s.book, key: key}, nil, nil
}

// finish records the request path's outcome under its id (as
// booking.finish): the buckets its settling descriptors took, or the
// mark of a refusal; an error forgets the id.
func (b *envoyBooking) finish(ctx context.Context, c *rlsCall, err error) {
	if b == nil {
		return
	}
	if err != nil {
		b.bk.Finish(ctx, b.key, bookingFP, nil)
		return
	}
	if c.overall != rls.RateLimitResponse_OK {
		b.bk.Finish(ctx, b.key, bookingFP, []byte(refusedAn))
		return
	}
	var taken []bookedItem
	seen := map[int]bool{}
	for i := range c.ds {
		if a := &c.ds[i]; a.settles() && a.item >= 0 && !seen[a.item] {
			seen[a.item] = true
			it := &c.items[a.item]
			taken = append(taken, bookedItem{Key: it.Key, Cost: it.Cost, RefundBefore: it.RefundBefore})
		}
	}
	raw, _ := json.Marshal(taken)
	rid, err := b.bk.AddRecord(ctx, book.Record{Receipt: raw})
	if err != nil {
		b.bk.Finish(ctx, b.key, bookingFP, nil) // (the estimates stay charged)
		return
	}
	b.bk.Finish(ctx, b.key, bookingFP, []byte(bookedTag+rid))
}

// settleBooked settles receipt record rid: each booked bucket to the sum
// of the hits_addend of this call's settling descriptors of it (a bucket
// they do not name keeps its booking), exactly: a refund before its
// RefundBefore, or a charge into debt. The call takes nothing else and is
// answered OK.
func (s *Service) settleBooked(ctx context.Context, rid string, c *rlsCall) (*rls.RateLimitResponse, error) {
	var taken []bookedItem
	check := func(raw []byte) error { return json.Unmarshal(raw, &taken) }
	if _, err := s.book.TakeReceipt(ctx, rid, check); err != nil {
		if errors.Is(err, book.ErrSettled) || errors.Is(err, book.ErrUnknown) || errors.Is(err, book.ErrDropped) {
			return nil, err
		}
		p := answer.Classify(err)
		p.Msg = "book: " + p.Msg
		return nil, grpcError(p)
	}
	used := map[string]int64{}
	specs := map[string]*store.Spec{}
	for i := range c.ds {
		if a := &c.ds[i]; a.settles() && a.node.Limit.spec != nil {
			used[a.key] += a.hits
			specs[a.key] = a.node.Limit.spec
		}
	}
	var adj []store.Adjustment
	for _, t := range taken {
		if sp := specs[t.Key]; sp != nil && used[t.Key] != t.Cost {
			adj = append(adj, store.Adjustment{Key: t.Key, Spec: sp, Delta: used[t.Key] - t.Cost, RefundBefore: t.RefundBefore})
		}
	}
	if len(adj) > 0 {
		if err := s.st.Adjust(ctx, adj); err != nil {
			p := answer.Classify(err)
			p.Msg = "store: " + p.Msg
			return nil, grpcError(p)
		}
	}
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: make([]*rls.RateLimitResponse_DescriptorStatus, len(c.ds))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
	}
	return resp, nil
}
