// Service: Envoy's RateLimitService over a store, configured by Envoy's own files.

package envoyrls

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
)

// Service implements rls.RateLimitServiceServer over a store.
type Service struct {
	rls.UnimplementedRateLimitServiceServer
	cfg       atomic.Pointer[Config]
	st        store.Store
	decisions *prometheus.CounterVec // nil: not counted
	ctrs      atomic.Pointer[nodeCounters]
	overrides overrides     // descriptors' own limits
	ref       *refStats     // the reference's metrics; nil: not counted
	set       chan struct{} // closed by the first SetConfig
	setOnce   sync.Once
	book      book.Book // envoy_settle's bookings (settle_envoy.go); nil: none
}

// Register counts the service's decisions in reg as
// sluice_decisions_total{limit, result, attempt="original"}, as the policy
// mode does: result "admitted", "rejected", or "shadow_rejected" for a
// shadow_mode descriptor's would-be refusal; limit is the descriptor's
// rate_limit name, else its key path in the configuration (bounded by the
// configuration, never a request's value); for a descriptor with its own
// limit (RateLimitDescriptor.limit), the domain and the descriptor's
// entry keys, dotted ("domain.key1.key2").
func (s *Service) Register(reg prometheus.Registerer) error {
	s.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decisions_total",
		Help: "Admission decisions per limit, by result (admitted/rejected/shadow_rejected) and attempt (original/retry).",
	}, []string{"limit", "result", "attempt"})
	return reg.Register(s.decisions)
}

// NewService serves cfg with state in st.
func NewService(cfg *Config, st store.Store) *Service {
	s := &Service{st: st, set: make(chan struct{})}
	s.cfg.Store(cfg)
	return s
}

// Configured is closed once SetConfig has been called (a configuration
// given after NewService's: a reload, an xDS snapshot).
func (s *Service) Configured() <-chan struct{} { return s.set }

// SetConfig replaces the configuration at once (hot reload); buckets of
// unchanged descriptors keep their state only if their limits are equal.
func (s *Service) SetConfig(cfg *Config) {
	s.cfg.Store(cfg)
	s.NoteConfigLoad(nil)
	s.setOnce.Do(func() { close(s.set) })
}

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
		return grpcError(answer.Errorf(answer.BadRequest, "descriptor %d has %d entries, more than %d", i, len(entries), MaxEntries))
	}
	for _, e := range entries {
		if len(e.GetKey()) > MaxEntryBytes || len(e.GetValue()) > MaxEntryBytes {
			return grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: an entry's key or value is longer than %d bytes", i, MaxEntryBytes))
		}
	}
	return nil
}

// grpcError is p as a gRPC status: the gRPC code of p's error code in
// internal/answer's table, and p's message.
func grpcError(p answer.Problem) error { return status.Error(codes.Code(p.GRPC), p.Msg) }

type applied struct {
	node  *Node
	key   string
	stat  *[nStats]atomic.Uint64 // where the reference's metrics count it, when they are counted
	hits  int64
	item  int // index in items (in quota when quota), -1 when not taken (no limit, unlimited, shadow, or over capacity)
	over  bool
	shade bool
	quota bool   // a quota_mode descriptor
	own   bool   // node is the descriptor's own limit (made for this call, not the configuration's)
	by    string // the envoy_settle by entry the descriptor carried ("": none)
}

// ShouldRateLimit implements the RateLimitService.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	if len(req.GetDescriptors()) > MaxDescriptors {
		return nil, grpcError(answer.Errorf(answer.BadRequest, "%d descriptors, more than %d", len(req.GetDescriptors()), MaxDescriptors))
	}
	if s.ref != nil {
		defer s.ref.called(time.Now())
	}
	cfg := s.cfg.Load()
	c := &rlsCall{overall: rls.RateLimitResponse_OK, ref: s.ref}
	if n := len(req.GetDescriptors()); n == 1 {
		// The common call, one descriptor: its state and its whole answer
		// in one allocation.
		b := new(oneCall)
		c.ds, c.items, c.rb, c.sbs = b.ds[:], b.items[:0], &b.respBuf, b.sb[:]
		c.rb.statuses = b.stp[:0]
	} else {
		c.ds = make([]applied, n)
		c.index, c.shadowIx = map[string]int{}, map[string]int{}
	}
	if err := c.collect(req, cfg.Domains[req.GetDomain()], &s.overrides); err != nil {
		s.ref.callError("service_error")
		return nil, err
	}
	bk, settled, err := s.settleBegin(ctx, req, c)
	if settled != nil || err != nil {
		return settled, err
	}
	err = c.decide(ctx, s.st)
	bk.finish(ctx, c, err)
	if err != nil {
		s.ref.callError("redis_error")
		return nil, err
	}
	return c.respond(s.decisions, s.counters(cfg)), nil
}

// rlsCall is one ShouldRateLimit call: per descriptor what applies, the
// store items to take (descriptors of one key merged), the shadow items
// (counted, never refusing: the limiter's rule, limiter.DecideShadow), and
// the overall code so far.
type rlsCall struct {
	ds                   []applied
	items, shadow, quota []store.Item
	index, shadowIx      map[string]int // key -> index in items, in shadow; made when a call has several descriptors
	overall              rls.RateLimitResponse_Code
	quotas, quotaOver    int       // quota_mode descriptors of the call, and those over their limit
	settleID             string    // the request's id, from an envoy_settle by entry ("": none)
	ref                  *refStats // nil: the reference's metrics are not counted
	rb                   *respBuf  // where the answer is written; nil: respond allocates it
	sbs                  []statusBuf
}

// collect matches every descriptor of req against the domain's tree root
// (nil: an unknown domain, which limits nothing) and makes the items. A
// descriptor with its own limit (Envoy's per-request override) is limited
// by it instead, as the reference service does: in a known domain,
// whatever the tree holds for it (see overrides.limit).
func (c *rlsCall) collect(req *rls.RateLimitRequest, root *Node, ov *overrides) error {
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	var ebuf [8][2]string
	var kbuf [128]byte
	var pbuf [8]step
	replacing := false
	for i, d := range req.GetDescriptors() {
		a := &c.ds[i]
		a.item = -1
		if err := checkEntries(i, d.GetEntries()); err != nil {
			return err
		}
		a.hits = hits
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt32 {
				return grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: hits_addend %d too large", i, h.GetValue()))
			}
			a.hits = int64(h.GetValue()) // 0 peeks
		}
		if root == nil {
			continue
		}
		entries := ebuf[:0]
		for _, e := range d.GetEntries() {
			if len(root.settleBy) > 0 { // (the request's id: never matched)
				skip, err := c.settleEntry(root.settleBy, i, a, e)
				if err != nil {
					return err
				}
				if skip {
					continue
				}
			}
			entries = append(entries, [2]string{e.GetKey(), e.GetValue()})
		}
		var node *Node
		var path []step
		if o := d.GetLimit(); o != nil {
			l, err := ov.limit(i, o)
			if err != nil {
				return err
			}
			node, a.own = &Node{Key: overrideLabel(req.GetDomain(), entries), Limit: l}, true
		} else {
			if path = matchPath(root, entries, pbuf[:0]); path == nil {
				continue
			}
			if node = path[len(path)-1].node; node.Limit == nil {
				continue
			}
		}
		// The key: the limit's state tag (a changed rate_limit in other
		// units starts anew), the domain and the entries (a value matched
		// by a share_threshold wildcard: the wildcard, one bucket for all).
		key := kbuf[:0]
		if node.Limit.spec != nil {
			key = append(append(key, node.Limit.spec.StateTag()...), '|')
		}
		key = append(key, req.GetDomain()...)
		for j, e := range entries {
			v := e[1]
			if path != nil && path[j].how == byWild && path[j].node.ShareThreshold {
				v = path[j].node.Value
			}
			key = appendEscaped(append(appendEscaped(append(key, '|'), e[0]), '='), v)
		}
		a.node, a.key = node, string(key)
		if c.ref != nil {
			a.stat = c.ref.countsFor(req.GetDomain(), entries, path)
		}
		if len(node.Limit.Replaces) > 0 {
			replacing = true
		}
	}
	// A matched limit that replaces others by name drops them from the
	// call (the reference's replaces), whichever descriptor matched them.
	var replaced map[string]bool
	if replacing {
		replaced = map[string]bool{}
		for i := range c.ds {
			if n := c.ds[i].node; n != nil {
				for _, r := range n.Limit.Replaces {
					replaced[r] = true
				}
			}
		}
	}
	for i := range c.ds {
		a := &c.ds[i]
		if a.node == nil {
			continue
		}
		if name := a.node.Limit.Name; name != "" && replaced[name] {
			a.node = nil
			continue
		}
		c.add(a)
	}
	return nil
}

// add makes descriptor a's item (or merges it into one of the same key).
func (c *rlsCall) add(a *applied) {
	node := a.node
	if node.Limit.Unlimited {
		return
	}
	if node.Shadow {
		a.shade = true
		if j, ok := c.shadowIx[a.key]; ok && c.shadowIx != nil {
			c.shadow[j].Cost += a.hits
		} else {
			if c.shadowIx != nil {
				c.shadowIx[a.key] = len(c.shadow)
			}
			c.shadow = append(c.shadow, store.Item{Key: a.key, Spec: node.Limit.spec, Cost: a.hits})
		}
		return
	}
	if node.Quota {
		a.quota = true
		c.quotas++
		if a.hits > int64(node.Limit.RequestsPerUnit) || node.Limit.spec == nil {
			a.over = true
			c.quotaOver++
			return
		}
		a.item = len(c.quota)
		c.quota = append(c.quota, store.Item{Key: a.key, Spec: node.Limit.spec, Cost: a.hits})
		return
	}
	if a.hits > int64(node.Limit.RequestsPerUnit) || node.Limit.spec == nil {
		a.over, c.overall = true, rls.RateLimitResponse_OVER_LIMIT // can never be admitted
		return
	}
	if j, ok := c.index[a.key]; ok {
		c.items[j].Cost += a.hits
		if c.items[j].Cost > c.items[j].Spec.Capacity() {
			a.over, c.overall = true, rls.RateLimitResponse_OVER_LIMIT
		}
		a.item = j
		return
	}
	if c.index != nil {
		c.index[a.key] = len(c.items)
	}
	a.item = len(c.items)
	c.items = append(c.items, store.Item{Key: a.key, Spec: node.Limit.spec, Cost: a.hits})
}

// decide takes the items from st, all or nothing (or, when one is over
// its capacity, peeks them all), then decides the shadow items one by one
// (limiter.DecideShadow: a refused call's are peeked).
func (c *rlsCall) decide(ctx context.Context, st store.Store) error {
	items := c.items
	if len(items) > 0 && c.overall == rls.RateLimitResponse_OK {
		r, err := st.Take(ctx, items)
		if err != nil {
			p := answer.Classify(err)
			p.Msg = "store: " + p.Msg
			return grpcError(p)
		}
		if !r.Allowed {
			c.overall = rls.RateLimitResponse_OVER_LIMIT
		}
	} else if len(items) > 0 {
		// Over capacity somewhere: peek the others so their statuses are
		// reported, taking nothing.
		for j := range items {
			items[j].Cost = 0
		}
		if _, err := st.Take(ctx, items); err != nil {
			p := answer.Classify(err)
			p.Msg = "store: " + p.Msg
			return grpcError(p)
		}
	}
	if err := c.decideQuota(ctx, st); err != nil {
		return err
	}
	if len(c.shadow) > 0 {
		take := func(its []store.Item) (store.Result, error) { return st.Take(ctx, its) }
		for j := range c.shadow {
			limiter.DecideShadow(c.shadow[j:j+1], c.overall != rls.RateLimitResponse_OK, take) // (an error: reported admitting)
		}
	}
	return nil
}

// respond renders the decisions: a status per descriptor and the
// RateLimit fields of the tightest limited one.
func (c *rlsCall) respond(decisions *prometheus.CounterVec, cs *nodeCounters) *rls.RateLimitResponse {
	rb := c.rb
	if rb == nil {
		rb = &respBuf{statuses: make([]*rls.RateLimitResponse_DescriptorStatus, 0, len(c.ds))}
		c.sbs = make([]statusBuf, len(c.ds))
	}
	resp := &rb.resp
	resp.OverallCode, resp.Statuses = c.overall, rb.statuses
	var lbuf [8]answer.Limit
	described := lbuf[:0] // the limited descriptors, for the RateLimit fields
	for i := range c.ds {
		st, lim, ok := c.status(&c.ds[i], &c.sbs[i])
		if ok {
			described = append(described, lim)
			if decisions != nil {
				c.count(decisions, cs, &c.ds[i], st, lim)
			}
		}
		if c.ref != nil && ok {
			c.ref.observe(&c.ds[i], st, lim)
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if i := answer.Tightest(described); i >= 0 {
		pol, rl := fields(described[i])
		rb.hv[0].Key, rb.hv[0].Value = "RateLimit-Policy", pol
		rb.hv[1].Key, rb.hv[1].Value = "RateLimit", rl
		rb.hdrs[0], rb.hdrs[1] = &rb.hv[0], &rb.hv[1]
		resp.ResponseHeadersToAdd = rb.hdrs[:]
	}
	return resp
}

// status is descriptor a's status, and its limit as the RateLimit fields
// describe it (described false: unlimited or no limit).
func (c *rlsCall) status(a *applied, b *statusBuf) (st *rls.RateLimitResponse_DescriptorStatus, lim answer.Limit, described bool) {
	st = &b.st
	st.Code = rls.RateLimitResponse_OK
	if a.node == nil || a.node.Limit == nil {
		return st, lim, false
	}
	l := a.node.Limit
	if l.Unlimited {
		st.LimitRemaining = math.MaxUint32 // as the reference answers an unlimited descriptor
		return st, lim, false
	}
	b.cur.Name, b.cur.RequestsPerUnit, b.cur.Unit = l.Name, l.RequestsPerUnit, l.Unit
	st.CurrentLimit = &b.cur
	var d sluice.Decision
	switch {
	case a.item >= 0 && a.quota:
		d = c.quota[a.item].Decision
	case a.item >= 0:
		d = c.items[a.item].Decision
	case a.shade:
		it := c.shadow[c.shadowIx[a.key]] // shadowIx is nil (index 0) for a lone descriptor
		// The code stays OK; the RateLimit fields say what enforcing it
		// would have.
		d = it.Decision
		refused := limiter.ShadowRefused(it, a.hits)
		d.Allowed = true
		defer func() { lim.Allowed = !refused }()
	}
	switch {
	case a.over && !a.shade:
		st.Code = rls.RateLimitResponse_OVER_LIMIT
	case !d.Allowed && !a.shade:
		st.Code = rls.RateLimitResponse_OVER_LIMIT
		st.LimitRemaining = uint32(max(d.Remaining, 0))
		b.setDuration(d.RetryAfter)
	default:
		st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
		b.setDuration(d.ResetAfter)
	}
	name := l.Name
	if name == "" {
		name = a.key
	}
	ok := st.Code == rls.RateLimitResponse_OK
	wait := st.DurationUntilReset.AsDuration() // nil: 0
	lim = answer.Limit{Name: name, Capacity: int64(l.RequestsPerUnit), Window: time.Duration(unitSeconds(l.Unit) * 1e9),
		Remaining: int64(st.LimitRemaining), Allowed: ok, ResetAfter: wait}
	if !ok {
		lim.ResetAfter, lim.RetryAfter = 0, wait
	}
	return st, lim, true
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

// limitLabel is a descriptor's limit as the metrics name it: its
// rate_limit name, else its key (and value) in the configuration.
func limitLabel(n *Node) string {
	if n.Limit.Name != "" {
		return n.Limit.Name
	}
	if n.Value != "" {
		return n.Key + "_" + n.Value
	}
	return n.Key
}

// result is a decided descriptor's metrics result: admitted, rejected, or
// shadow_rejected (a shadow_mode descriptor's would-be refusal).
func (c *rlsCall) result(a *applied, st *rls.RateLimitResponse_DescriptorStatus, lim answer.Limit) string {
	switch {
	case a.shade && !lim.Allowed:
		return limiter.ResultShadowRejected
	case st.Code != rls.RateLimitResponse_OK:
		return limiter.ResultRejected
	}
	return limiter.ResultAdmitted
}

// NotConfigured is the error a RateLimitService answers while it has no
// configuration yet (sluice ratelimit waiting for its xDS server's first
// snapshot): no_policy, gRPC UNAVAILABLE, with why as the message — what
// Envoy meets as a service it cannot reach (its failure_mode_deny).
func NotConfigured(why string) error {
	return grpcError(answer.Errorf(answer.NoPolicy, "%s", why))
}
