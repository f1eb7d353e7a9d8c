// The Redis store's error counter, sluice_redis_errors_total{class}.

package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/store/redisstore"
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
