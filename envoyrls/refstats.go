// The reference service's metrics, named as its Prometheus mapping names them.

package envoyrls

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/answer"
)

// MaxDetailedKeys bounds the series (label sets, {domain, key1} or
// {domain, key1, key2}) that stats keys made of requests' values —
// detailed_metric, value_to_metric, a descriptor's own limit — add to the
// reference's per-limit metrics across a Service's life: a key whose
// series exists is counted there; a key that would add a series beyond
// the bound is counted under its configuration's key (as without those
// fields) and in sluice_envoy_detailed_keys_dropped_total. So requests
// cannot grow the metrics (nor the memory that holds them) without bound:
// a flood of distinct values keeps at most this many series, the first
// made, each of at most two entries' keys and values (MaxEntryBytes).
const MaxDetailedKeys = 10000

// NearLimitRatio is the reference's NEAR_LIMIT_RATIO default: an admitted
// hit that leaves more than this share of the limit used is near_limit.
const NearLimitRatio = 0.8

// refStats counts what the reference service counts, in the series its
// statsd exporter mapping (examples/prom-statsd-exporter/conf.yaml, the
// built-in mapping of its USE_PROMETHEUS) makes of them.
type refStats struct {
	limits            *refLimits
	requests, errors  *prometheus.CounterVec
	latency           *prometheus.HistogramVec
	calls             prometheus.Counter  // requests{grpc_method="ShouldRateLimit"}
	callTime          prometheus.Observer // latency's
	loads, loadErrors atomic.Int64
	dropped           prometheus.Counter // sluice_envoy_detailed_keys_dropped_total
}

// RegisterReference counts the service's decisions in reg under the
// reference service's Prometheus names too, so that its dashboards keep
// working:
//
//   - ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,
//     within_limit,shadow_mode}: per limit, hits (hits_addend) in total,
//     refused (a shadow_mode limit's would-be refusals included, also
//     counted in shadow_mode), admitted, and admitted with more than
//     NearLimitRatio of the limit used. The labels are the reference's
//     stats key, "DOMAIN.KEY_VALUE.KEY_VALUE..." split at its dots as the
//     mapping splits it: {domain, key1} for a key of two parts, {domain,
//     key1, key2} for more (deeper parts dropped, their counts summed, as
//     the mapping does). The key names the
//     configuration's nodes (a key-only node by its key, a wildcard by its
//     pattern): bounded by the configuration. detailed_metric and
//     value_to_metric put request values in it as the reference does, at
//     most MaxDetailedKeys series of them; each descriptor counted under
//     its configuration's key beyond is counted in
//     sluice_envoy_detailed_keys_dropped_total.
//   - ratelimit_service_total_requests{grpc_method} and
//     ratelimit_service_response_time_seconds{grpc_method} (a histogram),
//     grpc_method "ShouldRateLimit";
//     ratelimit_service_should_rate_limit_error{err_type}: err_type
//     "redis_error" (the store failed) or "service_error" (a bad request);
//   - ratelimit_service_config_load_success and
//     ratelimit_service_config_load_error: configurations taken (SetConfig,
//     NoteConfigLoad(nil)) and refused (NoteConfigLoad(err)).
func (s *Service) RegisterReference(reg prometheus.Registerer) error {
	r := &refStats{
		limits:   newRefLimits(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_total_requests", Help: "ShouldRateLimit calls (the reference's name)."}, []string{"grpc_method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_should_rate_limit_error",
			Help: "ShouldRateLimit calls that failed, by err_type: redis_error or service_error (the reference's name)."}, []string{"err_type"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ratelimit_service_response_time_seconds",
			Help: "ShouldRateLimit's time to answer (the reference's name)."}, []string{"grpc_method"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_envoy_detailed_keys_dropped_total",
			Help: "Descriptors counted under their configuration's stats key in the reference's per-limit metrics because their own key " +
				"(request values: detailed_metric, value_to_metric, a descriptor's limit) would have added a series beyond envoyrls.MaxDetailedKeys."}),
	}
	loads := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
		Help: "Rate-limit configurations loaded (the reference's name)."}, func() float64 { return float64(r.loads.Load()) })
	loadErrors := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
		Help: "Rate-limit configurations refused, the one in force kept (the reference's name)."}, func() float64 { return float64(r.loadErrors.Load()) })
	for _, c := range []prometheus.Collector{r.limits, r.requests, r.errors, r.latency, loads, loadErrors, r.dropped} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	r.errors.WithLabelValues("redis_error")
	r.errors.WithLabelValues("service_error")
	r.calls, r.callTime = r.requests.WithLabelValues("ShouldRateLimit"), r.latency.WithLabelValues("ShouldRateLimit")
	s.ref = r
	return nil
}

// NoteConfigLoad counts a configuration loaded (err nil) or refused in
// ratelimit_service_config_load_success or _error (RegisterReference);
// SetConfig counts its configuration itself.
func (s *Service) NoteConfigLoad(err error) {
	if s.ref == nil {
		return
	}
	if err != nil {
		s.ref.loadErrors.Add(1)
		return
	}
	s.ref.loads.Add(1)
}

// callError counts a failed call (r nil: not counted).
func (r *refStats) callError(errType string) {
	if r != nil {
		r.errors.WithLabelValues(errType).Inc()
	}
}

// called counts a call that started at start.
func (r *refStats) called(start time.Time) {
	r.calls.Inc()
	r.callTime.Observe(time.Since(start).Seconds())
}

// refCache is a node's counts, for a stats key that names only the
// configuration (the same for every request that reaches the node).
type refCache struct {
	r      *refStats
	domain string
	counts *[nStats]atomic.Uint64
}

// countsFor is where a matched descriptor is counted (statKey's key),
// kept on the node when the key names only the configuration.
func (r *refStats) countsFor(domain string, entries [][2]string, path []step) *[nStats]atomic.Uint64 {
	if path == nil || !static(path) {
		return r.detailedCounts(r.statKey(domain, entries, path))
	}
	leaf := path[len(path)-1].node
	if c := leaf.ref.Load(); c != nil && c.r == r && c.domain == domain {
		return c.counts
	}
	key, _ := r.statKey(domain, entries, path)
	c := &refCache{r: r, domain: domain, counts: r.limits.counts(key, false)}
	leaf.ref.Store(c)
	return c.counts
}

// static reports whether a path's stats key names only the configuration:
// no detailed_metric at its end, no value_to_metric where a request's
// value would show (a wildcard without share_threshold, a key-only node).
func static(path []step) bool {
	if path[len(path)-1].node.DetailedMetric {
		return false
	}
	for _, st := range path {
		if st.node.ValueToMetric && (st.how == byKeyOnly || st.how == byWild && !st.node.ShareThreshold) {
			return false
		}
	}
	return true
}

// detailedCounts are the counts of key, a stats key that may hold request
// values, or those of cfgKey, the key without them, where key would add a
// series beyond MaxDetailedKeys (counted in dropped).
func (r *refStats) detailedCounts(key, cfgKey string) *[nStats]atomic.Uint64 {
	if key == cfgKey {
		return r.limits.counts(key, false)
	}
	if c := r.limits.counts(key, true); c != nil {
		return c
	}
	r.dropped.Inc()
	return r.limits.counts(cfgKey, false)
}

// statKey is a matched descriptor's stats key as the reference service
// makes it (config GetLimit's FullKey), and cfgKey the key of the
// configuration's nodes alone (the two are equal when the key holds no
// request value): path nil is a descriptor with its own limit,
// "DOMAIN.KEY_VALUE..." of its entries as there.
func (r *refStats) statKey(domain string, entries [][2]string, path []step) (key, cfgKey string) {
	var b, base strings.Builder
	b.WriteString(domain)
	base.WriteString(domain)
	if path == nil {
		for _, e := range entries {
			b.WriteString("." + e[0])
			base.WriteString("." + e[0])
			if e[1] != "" {
				b.WriteString("_" + e[1])
			}
		}
		return b.String(), base.String()
	}
	share := false
	for _, st := range path {
		base.WriteString("." + st.node.Key)
		if st.node.Value != "" {
			base.WriteString("_" + st.node.Value)
		}
		share = share || st.how == byWild && st.node.ShareThreshold
	}
	leaf := path[len(path)-1].node
	for j, e := range entries {
		n, how := path[j].node, path[j].how
		v := ""
		switch {
		case how == byWild && n.ShareThreshold:
			v = n.Value
		case leaf.DetailedMetric:
			v = e[1]
			if !share && v == "" {
				b.WriteString("." + e[0] + "_")
				continue
			}
		case how == byWild && !n.ValueToMetric:
			v = n.Value
		case how == byValue, n.ValueToMetric:
			v = e[1]
		}
		b.WriteString("." + e[0])
		if v != "" {
			b.WriteString("_" + v)
		}
	}
	return b.String(), base.String()
}

// observe counts a decided descriptor with a limit.
func (r *refStats) observe(a *applied, st *rls.RateLimitResponse_DescriptorStatus, lim answer.Limit) {
	c := a.stat
	hits := uint64(a.hits)
	c[statHits].Add(hits)
	if st.Code == rls.RateLimitResponse_OVER_LIMIT || a.shade && !lim.Allowed {
		c[statOver].Add(hits)
		if a.shade {
			c[statShadow].Add(hits)
		}
		return
	}
	c[statWithin].Add(hits)
	rpu := int64(a.node.Limit.RequestsPerUnit)
	near := int64(math.Floor(float64(rpu) * NearLimitRatio))
	if used := rpu - int64(st.LimitRemaining); used > near {
		c[statNear].Add(min(hits, uint64(used-near)))
	}
}

// The per-limit counts, in the order of refLimitNames.
const (
	statHits = iota
	statOver
	statNear
	statWithin
	statShadow
	nStats
)

var refLimitNames = [nStats][2]string{
	{"total_hits", "Hits per limit (the reference's name)."},
	{"over_limit", "Hits over the limit, shadow_mode's would-be refusals included (the reference's name)."},
	{"near_limit", "Admitted hits with more than 80% of the limit used (the reference's name)."},
	{"within_limit", "Admitted hits (the reference's name)."},
	{"shadow_mode", "Hits over a shadow_mode limit, admitted (the reference's name)."},
}

// refLimits holds the per-limit counts by their labels, and exports them
// as the reference's mapping does: a stats key of two parts as {domain,
// key1}, one of more as {domain, key1, key2}. One metric name has both
// label sets, so it is an unchecked collector (Describe sends nothing).
type refLimits struct {
	mu       sync.RWMutex
	m        map[[3]string]*[nStats]atomic.Uint64 // {domain, key1, key2}; key2 "\x00": none
	detailed int                                  // series of m made by keys with request values (at most MaxDetailedKeys)
	two      [nStats]*prometheus.Desc             // {domain, key1}
	three    [nStats]*prometheus.Desc             // {domain, key1, key2}
}

func newRefLimits() *refLimits {
	l := &refLimits{m: map[[3]string]*[nStats]atomic.Uint64{}}
	for i, n := range refLimitNames {
		l.two[i] = prometheus.NewDesc("ratelimit_service_rate_limit_"+n[0], n[1], []string{"domain", "key1"}, nil)
		l.three[i] = prometheus.NewDesc("ratelimit_service_rate_limit_"+n[0], n[1], []string{"domain", "key1", "key2"}, nil)
	}
	return l
}

// counts are the counts of a stats key, made on first use; with detailed
// (a key holding request values), made only while fewer than
// MaxDetailedKeys such series were: beyond, nil.
func (l *refLimits) counts(key string, detailed bool) *[nStats]atomic.Uint64 {
	parts := strings.SplitN(strings.ToValidUTF8(key, "\uFFFD"), ".", 4)
	k := [3]string{parts[0], "", "\x00"}
	copy(k[1:], parts[1:min(len(parts), 3)])
	l.mu.RLock()
	c := l.m[k]
	l.mu.RUnlock()
	if c != nil {
		return c
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c = l.m[k]; c == nil {
		if detailed {
			if l.detailed >= MaxDetailedKeys {
				return nil
			}
			l.detailed++
		}
		c = new([nStats]atomic.Uint64)
		l.m[k] = c
	}
	return c
}

// Describe sends nothing: the collector is unchecked (see refLimits).
func (l *refLimits) Describe(chan<- *prometheus.Desc) {}

// Collect sends every count of every limit seen.
func (l *refLimits) Collect(ch chan<- prometheus.Metric) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for k, c := range l.m {
		for i := range c {
			v := float64(c[i].Load())
			if k[2] == "\x00" {
				ch <- prometheus.MustNewConstMetric(l.two[i], prometheus.CounterValue, v, k[0], k[1])
			} else {
				ch <- prometheus.MustNewConstMetric(l.three[i], prometheus.CounterValue, v, k[0], k[1], k[2])
			}
		}
	}
}
