// The store's evictions as a metric, by reason.

package limiter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/store"
)

// EvictionReasons are the values of sluice_evictions_total's reason label:
// "idle", a key whose state was a new key's again (no decision changes),
// and "lru", a key with state evicted, approximately least recently used first (a CLOCK hand), to make
// room for a new key at the store's key cap (its next request starts anew;
// store/memstore states the bound).
var EvictionReasons = []string{EvictionIdle, EvictionLRU}

// The reasons of EvictionReasons.
const (
	EvictionIdle = "idle"
	EvictionLRU  = "lru"
)

// evictionsByReason is implemented by stores that tell their evictions
// apart (store/memstore).
type evictionsByReason interface {
	EvictionsByReason() (idle, lru uint64)
}

// evictionMetrics is sluice_evictions_total{reason} for sr: one series per
// reason (a store that does not tell them apart evicts only idle keys).
func evictionMetrics(sr store.StatsReporter) []prometheus.Collector {
	byReason, _ := sr.(evictionsByReason)
	count := func(reason string) func() float64 {
		return func() float64 {
			if byReason == nil {
				if reason == EvictionIdle {
					return float64(sr.Stats().Evictions)
				}
				return 0
			}
			idle, lru := byReason.EvictionsByReason()
			if reason == EvictionIdle {
				return float64(idle)
			}
			return float64(lru)
		}
	}
	var cs []prometheus.Collector
	for _, r := range EvictionReasons {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "sluice_evictions_total",
			Help:        "Keys evicted by the store, by reason: idle (state equal to a new key's) or lru (a key with state not used since the CLOCK hand last passed it, approximately least recently used, for a new key at the key cap).",
			ConstLabels: prometheus.Labels{"reason": r},
		}, count(r)))
	}
	return cs
}
