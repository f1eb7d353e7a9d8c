// A flood of distinct request values in the reference's per-limit metrics (detailed_metric, value_to_metric) stays bounded.

package envoyrls_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/envoyrls"
)

// gathered is a metric family's series count and the sum of its values.
func gathered(t *testing.T, reg *prometheus.Registry, name string) (series int, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			series++
			sum += m.GetCounter().GetValue()
		}
	}
	return series, sum
}

// 100,000 distinct values: at most MaxDetailedKeys series are made of
// them, the rest are counted under the configuration's key and in
// sluice_envoy_detailed_keys_dropped_total, no hit lost; values that
// differ only past the mapping's key2 (an IP's last parts) share a series
// and take nothing from the bound.
func TestReferenceStatsFloodBounded(t *testing.T) {
	const flood = 100_000
	svc, reg := refService(t)
	for i := range flood {
		refAsk(t, svc, desc("user", fmt.Sprint("u", i)))
	}
	series, total := gathered(t, reg, "ratelimit_service_rate_limit_total_hits")
	if series != envoyrls.MaxDetailedKeys+1 || total != flood {
		t.Fatalf("after %d distinct users: %d series counting %v hits; want %d (the bound, and the configuration's key) counting every hit",
			flood, series, total, envoyrls.MaxDetailedKeys+1)
	}
	if got := hits(t, reg, "d", "user", ""); got != flood-envoyrls.MaxDetailedKeys {
		t.Fatalf("under the configuration's key: %v, want %d", got, flood-envoyrls.MaxDetailedKeys)
	}
	if _, dropped := gathered(t, reg, "sluice_envoy_detailed_keys_dropped_total"); dropped != flood-envoyrls.MaxDetailedKeys {
		t.Fatalf("sluice_envoy_detailed_keys_dropped_total %v, want %d", dropped, flood-envoyrls.MaxDetailedKeys)
	}
	// A value_to_metric key whose series exists keeps being counted there.
	refAsk(t, svc, desc("user", "u7"))
	if got := hits(t, reg, "d", "user_u7", ""); got != 2 {
		t.Fatalf("user_u7: %v, want 2", got)
	}

	svc, reg = refService(t)
	for i := range flood {
		refAsk(t, svc, desc("ip", fmt.Sprintf("10.0.%d", i)))
	}
	if got := hits(t, reg, "d", "ip_10", "0"); got != flood {
		t.Fatalf("{d, ip_10, 0}: %v, want every one of the %d IPs", got, flood)
	}
	if series, _ := gathered(t, reg, "ratelimit_service_rate_limit_total_hits"); series != 1 {
		t.Fatalf("%d series, want 1", series)
	}
	if _, dropped := gathered(t, reg, "sluice_envoy_detailed_keys_dropped_total"); dropped != 0 {
		t.Fatalf("sluice_envoy_detailed_keys_dropped_total %v, want 0", dropped)
	}
}
