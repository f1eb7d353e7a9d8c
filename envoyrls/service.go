package envoyrls

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/store"
)

// Service implements rls.RateLimitServiceServer over a store.
type Service struct {
	rls.UnimplementedRateLimitServiceServer
	cfg atomic.Pointer[Config]
	st  store.Store
}

// NewService serves cfg with state in st.
func NewService(cfg *Config, st store.Store) *Service {
	s := &Service{st: st}
	s.cfg.Store(cfg)
	return s
}

// SetConfig replaces the configuration at once (hot reload); buckets of
// unchanged descriptors keep their state only if their limits are equal.
func (s *Service) SetConfig(cfg *Config) { s.cfg.Store(cfg) }

// MaxDescriptors bounds one request's descriptors, MaxEntries each
// descriptor's entries, and MaxEntryBytes each entry's key and value (keys
// are stored, so their size bounds memory).
const (
	MaxDescriptors = 64
	MaxEntries     = 32
	MaxEntryBytes  = 1024
)

// checkEntries refuses a descriptor with too many or too long entries.
func checkEntries(i int, entries []*ratelimitv3.RateLimitDescriptor_Entry) error {
	if len(entries) > MaxEntries {
		return status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries, more than %d", i, len(entries), MaxEntries)
	}
	for _, e := range entries {
		if len(e.GetKey()) > MaxEntryBytes || len(e.GetValue()) > MaxEntryBytes {
			return status.Errorf(codes.InvalidArgument, "descriptor %d: an entry's key or value is longer than %d bytes", i, MaxEntryBytes)
		}
	}
	return nil
}

type applied struct {
	node  *Node
	key   string
	hits  int64
	item  int // index in items, -1 when not taken (no limit, unlimited, shadow, or over capacity)
	over  bool
	shade bool
}

// ShouldRateLimit implements the RateLimitService.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	if len(req.GetDescriptors()) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors, more than %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	cfg := s.cfg.Load()
	root := cfg.Domains[req.GetDomain()]
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	ds := make([]applied, len(req.GetDescriptors()))
	var items, shadow []store.Item
	var index, shadowIx map[string]int // key -> index in items (merged), in shadow; made when a call has several descriptors
	if len(ds) > 1 {
		index, shadowIx = map[string]int{}, map[string]int{}
	}
	overall := rls.RateLimitResponse_OK
	var ebuf [8][2]string
	var kbuf [128]byte
	for i, d := range req.GetDescriptors() {
		a := &ds[i]
		a.item = -1
		if err := checkEntries(i, d.GetEntries()); err != nil {
			return nil, err
		}
		a.hits = hits
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt32 {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: hits_addend %d too large", i, h.GetValue())
			}
			a.hits = int64(h.GetValue()) // 0 peeks
		}
		if root == nil {
			continue
		}
		entries := ebuf[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, [2]string{e.GetKey(), e.GetValue()})
		}
		node := match(root, entries)
		if node == nil || node.Limit == nil {
			continue
		}
		// The key: the limit's state tag (a changed rate_limit in other
		// units starts anew), the domain and the entries.
		key := kbuf[:0]
		if node.Limit.spec != nil {
			key = append(append(key, node.Limit.spec.StateTag()...), '|')
		}
		key = append(key, req.GetDomain()...)
		for _, e := range entries {
			key = appendEscaped(append(appendEscaped(append(key, '|'), e[0]), '='), e[1])
		}
		a.node, a.key = node, string(key)
		if node.Limit.Unlimited {
			continue
		}
		if a.hits > int64(node.Limit.RequestsPerUnit) {
			a.over = true // can never be admitted
			if !node.Shadow {
				overall = rls.RateLimitResponse_OVER_LIMIT
			}
			continue
		}
		if node.Shadow {
			a.shade = true
			if j, ok := shadowIx[a.key]; ok && shadowIx != nil {
				shadow[j].Cost = min(shadow[j].Cost+a.hits, shadow[j].Spec.Capacity())
			} else {
				if shadowIx != nil {
					shadowIx[a.key] = len(shadow)
				}
				shadow = append(shadow, store.Item{Key: a.key, Spec: node.Limit.spec, Cost: a.hits})
			}
			continue
		}
		if j, ok := index[a.key]; ok {
			items[j].Cost += a.hits
			if items[j].Cost > items[j].Spec.Capacity() {
				a.over, overall = true, rls.RateLimitResponse_OVER_LIMIT
			}
			a.item = j
			continue
		}
		if index != nil {
			index[a.key] = len(items)
		}
		a.item = len(items)
		items = append(items, store.Item{Key: a.key, Spec: node.Limit.spec, Cost: a.hits})
	}
	if len(items) > 0 && overall == rls.RateLimitResponse_OK {
		r, err := s.st.Take(ctx, items)
		if err != nil {
			p := answer.Classify(err)
			return nil, status.Error(codes.Code(p.GRPC), "store: "+p.Msg)
		}
		if !r.Allowed {
			overall = rls.RateLimitResponse_OVER_LIMIT
		}
	} else if len(items) > 0 {
		// Over capacity somewhere: peek the others so their statuses are
		// reported, taking nothing.
		for j := range items {
			items[j].Cost = 0
		}
		if _, err := s.st.Take(ctx, items); err != nil {
			p := answer.Classify(err)
			return nil, status.Error(codes.Code(p.GRPC), "store: "+p.Msg)
		}
	}
	if len(shadow) > 0 && overall == rls.RateLimitResponse_OK {
		// Shadow limits count what passes, one by one, and refuse nothing.
		for j := range shadow {
			one := shadow[j : j+1]
			s.st.Take(ctx, one)
		}
	}
	resp := &rls.RateLimitResponse{OverallCode: overall, Statuses: make([]*rls.RateLimitResponse_DescriptorStatus, 0, len(ds))}
	var lbuf [8]answer.Limit
	described := lbuf[:0] // the limited descriptors, for the RateLimit fields
	for i := range ds {
		a := &ds[i]
		st := &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
		if a.node != nil && a.node.Limit != nil {
			l := a.node.Limit
			if !l.Unlimited {
				st.CurrentLimit = &rls.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}
			}
			var d sluice.Decision
			switch {
			case a.item >= 0:
				d = items[a.item].Decision
			case a.shade:
				d = shadow[shadowIx[a.key]].Decision // shadowIx is nil (index 0) for a lone descriptor
				d.Allowed = true
			}
			switch {
			case l.Unlimited:
			case a.over && !a.shade:
				st.Code = rls.RateLimitResponse_OVER_LIMIT
			case !d.Allowed && !a.shade:
				st.Code = rls.RateLimitResponse_OVER_LIMIT
				st.LimitRemaining = uint32(max(d.Remaining, 0))
				st.DurationUntilReset = durationpb.New(d.RetryAfter)
			default:
				st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
				st.DurationUntilReset = durationpb.New(d.ResetAfter)
			}
			if !l.Unlimited {
				name := l.Name
				if name == "" {
					name = a.key
				}
				ok := st.Code == rls.RateLimitResponse_OK
				wait := st.DurationUntilReset.AsDuration() // nil: 0
				lim := answer.Limit{Name: name, Capacity: int64(l.RequestsPerUnit), Window: time.Duration(unitSeconds(l.Unit) * 1e9),
					Remaining: int64(st.LimitRemaining), Allowed: ok, ResetAfter: wait}
				if !ok {
					lim.ResetAfter, lim.RetryAfter = 0, wait
				}
				described = append(described, lim)
			}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if i := answer.Tightest(described); i >= 0 {
		pol, rl := answer.Fields(described[i])
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: "RateLimit-Policy", Value: pol},
			{Key: "RateLimit", Value: rl},
		}
	}
	return resp, nil
}

func unitSeconds(u rls.RateLimitResponse_RateLimit_Unit) float64 {
	for _, x := range units {
		if x.unit == u {
			return x.secs
		}
	}
	return 1
}

// appendEscaped appends s with "%", "|" and "=" escaped (they separate the
// parts of a store key).
func appendEscaped(b []byte, s string) []byte { return envoyEsc.Append(b, s) }

var envoyEsc = keyesc.NewSet("|=")
