// Service's answers without an allocation per part: the buffers a call's
// response is written into, the RateLimit fields cut from one string, and
// decision counters resolved once per configured node.

package envoyrls

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
)

// oneCall is a one-descriptor call's state and answer, allocated at once.
type oneCall struct {
	respBuf
	ds    [1]applied
	items [1]store.Item
	stp   [1]*rls.RateLimitResponse_DescriptorStatus
	sb    [1]statusBuf
}

// respBuf is a response and its RateLimit header fields, allocated at
// once.
type respBuf struct {
	resp     rls.RateLimitResponse
	statuses []*rls.RateLimitResponse_DescriptorStatus // (len 0, cap the call's descriptors)
	hdrs     [2]*corev3.HeaderValue
	hv       [2]corev3.HeaderValue
}

// statusBuf is a descriptor's status with its current limit and duration,
// allocated at once.
type statusBuf struct {
	st  rls.RateLimitResponse_DescriptorStatus
	cur rls.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// setDuration is durationpb.New(d) written into b.dur, as
// st.DurationUntilReset.
func (b *statusBuf) setDuration(d time.Duration) {
	secs := d.Nanoseconds() / 1e9
	b.dur.Seconds, b.dur.Nanos = secs, int32(d.Nanoseconds()-secs*1e9)
	b.st.DurationUntilReset = &b.dur
}

// nodeCounters are the decision counters of cfg's nodes in vec, resolved
// once per node and result: sluice_decisions_total's labels of a
// configured node are its limitLabel and the result alone.
type nodeCounters struct {
	cfg *Config
	vec *prometheus.CounterVec
	m   sync.Map // *Node -> *[3]atomic.Value (prometheus.Counter per resultIndex)
}

// counters are cfg's node counters (nil: decisions not counted); a new
// configuration starts a new set, so a replaced one's nodes are let go.
func (s *Service) counters(cfg *Config) *nodeCounters {
	if s.decisions == nil {
		return nil
	}
	cs := s.ctrs.Load()
	if cs == nil || cs.cfg != cfg || cs.vec != s.decisions {
		cs = &nodeCounters{cfg: cfg, vec: s.decisions}
		s.ctrs.Store(cs)
	}
	return cs
}

// count adds descriptor a's decision to sluice_decisions_total.
func (c *rlsCall) count(vec *prometheus.CounterVec, cs *nodeCounters, a *applied, st *rls.RateLimitResponse_DescriptorStatus, lim answer.Limit) {
	res := c.result(a, st, lim)
	if cs == nil || a.own {
		vec.WithLabelValues(limitLabel(a.node), res, limiter.AttemptOriginal).Inc()
		return
	}
	i := 0
	switch res {
	case limiter.ResultRejected:
		i = 1
	case limiter.ResultShadowRejected:
		i = 2
	}
	v, ok := cs.m.Load(a.node)
	if !ok {
		v, _ = cs.m.LoadOrStore(a.node, new([3]atomic.Value))
	}
	slot := &v.(*[3]atomic.Value)[i]
	ctr, _ := slot.Load().(prometheus.Counter)
	if ctr == nil {
		ctr = cs.vec.WithLabelValues(limitLabel(a.node), res, limiter.AttemptOriginal)
		slot.Store(ctr)
	}
	ctr.Inc()
}

// fields is answer.Fields(l), both values cut from one string.
func fields(l answer.Limit) (policy, rateLimit string) {
	var b [320]byte
	q := strconv.AppendQuote(b[:0], l.Name)
	n := len(q)
	p := strconv.AppendInt(append(strconv.AppendInt(append(q, ";q="...), l.Capacity, 10), ";w="...), max(answer.Seconds(l.Window), 1), 10)
	np := len(p)
	wait := l.ResetAfter
	if !l.Allowed {
		wait = l.RetryAfter
	}
	r := strconv.AppendInt(append(strconv.AppendInt(append(append(p, q[:n]...), ";r="...), max(l.Remaining, 0), 10), ";t="...), answer.Seconds(wait), 10)
	s := string(r)
	return s[:np], s[np:]
}
