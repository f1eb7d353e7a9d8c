// The Redis store's error counter, sluice_redis_errors_total{class}; the
// refusal cache over it (--refusal-cache) and its metrics.

package main

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/refusal"
)

var redisErrorsDesc = prometheus.NewDesc("sluice_redis_errors_total",
	"Failed Redis calls (decisions, adjustments, releases, renewals, request ids and receipt records, probes) by class: "+
		"unreachable (no answer: connection, timeout, LOADING, BUSY), or Redis answering and refusing: oom (maxmemory under noeviction), "+
		"readonly (a replica), noscript (the library cannot be loaded), wrongtype (a key of another type), other.",
	[]string{"class"}, nil)

// redisErrors exports a Redis store's ErrorCounts: one series per class
// of redisstore.Classes, from the start (0 until one fails).
type redisErrors struct{ rs *redisstore.Store }

func (redisErrors) Describe(ch chan<- *prometheus.Desc) { ch <- redisErrorsDesc }

func (c redisErrors) Collect(ch chan<- prometheus.Metric) {
	n := c.rs.ErrorCounts()
	for _, class := range redisstore.Classes {
		ch <- prometheus.MustNewConstMetric(redisErrorsDesc, prometheus.CounterValue, float64(n[class]), class)
	}
}

// refusalCache wraps the Redis store in the refusal cache (store/refusal)
// of --refusal-cache entries, and registers its metrics; rs itself with
// --refusal-cache 0. It sits under leasing and failover: a lease's returned
// tokens reach it (and drop the key's refusal), and while Redis cannot be
// reached failover decides by on_store_error without calling it, so that
// the cache answers only while Redis does (its refusals are Redis's).
func (c serveCmd) refusalCache(rs store.Store, reg prometheus.Registerer) (store.Store, error) {
	if c.RefusalCache == 0 {
		return rs, nil
	}
	rc := refusal.New(rs, c.RefusalCache, refusal.WithLabel(newLimitLabels(maxRefusalLabels).of))
	if reg != nil {
		if err := reg.Register(refusalMetrics{rc}); err != nil {
			return nil, err
		}
	}
	return rc, nil
}

// maxRefusalLabels bounds the limit label's values of
// sluice_refusal_cache_hits_total (beyond it: "other").
const maxRefusalLabels = 1000

var (
	refusalHitsDesc = prometheus.NewDesc("sluice_refusal_cache_hits_total",
		"Requests refused from the refusal cache (--refusal-cache) without a Redis call, by limit.", []string{"limit"}, nil)
	refusalEntriesDesc = prometheus.NewDesc("sluice_refusal_cache_entries",
		"Refusals held by the refusal cache (at most --refusal-cache; some may have expired).", nil, nil)
)

// refusalMetrics exports a refusal cache's hits and size.
type refusalMetrics struct{ rc *refusal.Store }

func (refusalMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- refusalHitsDesc
	ch <- refusalEntriesDesc
}

func (m refusalMetrics) Collect(ch chan<- prometheus.Metric) {
	for l, n := range m.rc.HitsByLabel() {
		ch <- prometheus.MustNewConstMetric(refusalHitsDesc, prometheus.CounterValue, float64(n), l)
	}
	ch <- prometheus.MustNewConstMetric(refusalEntriesDesc, prometheus.GaugeValue, float64(m.rc.Len()))
}

// limitLabels names the limit of a store key, for a metric label: a
// policy's key is its hash tag (braced), the limit's name, "@" and its
// state tag or ":"; an Envoy configuration's is its state tag, "|" and the
// domain, whose name is used. At most max names are kept; others are
// "other".
type limitLabels struct {
	max  int64
	n    atomic.Int64
	seen sync.Map // string -> struct{}
}

func newLimitLabels(max int64) *limitLabels { return &limitLabels{max: max} }

func (l *limitLabels) of(key string) string {
	if strings.HasPrefix(key, "{") {
		if i := strings.IndexByte(key, '}'); i > 0 {
			key = key[i+1:]
		}
	}
	name := key
	if i := strings.IndexAny(key, ":@|"); i >= 0 {
		name = key[:i]
		if key[i] == '|' { // Envoy: tag|domain|entries
			name = key[i+1:]
			if j := strings.IndexByte(name, '|'); j >= 0 {
				name = name[:j]
			}
		}
	}
	if _, ok := l.seen.Load(name); ok {
		return name
	}
	if l.n.Add(1) > l.max {
		l.n.Add(-1)
		return "other"
	}
	if _, loaded := l.seen.LoadOrStore(name, struct{}{}); loaded {
		l.n.Add(-1)
	}
	return name
}
