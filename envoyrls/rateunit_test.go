package envoyrls_test

import (
	"math"
	"testing"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/envoyrls"
)

// current_limit states the refill rate: in the smallest Envoy unit where
// it is a whole number of requests, else per DAY rounded down.
func TestRateUnit(t *testing.T) {
	const (
		S = rls.RateLimitResponse_RateLimit_SECOND
		M = rls.RateLimitResponse_RateLimit_MINUTE
		H = rls.RateLimitResponse_RateLimit_HOUR
		D = rls.RateLimitResponse_RateLimit_DAY
		U = rls.RateLimitResponse_RateLimit_UNKNOWN
	)
	for _, c := range []struct {
		rate float64
		rpu  uint32
		unit rls.RateLimitResponse_RateLimit_Unit
	}{
		{20, 20, S}, // the tenant_api: capacity 100, 20/s = 1200/min
		{0.5, 30, M},
		{1.0 / 3600, 1, H},
		{100.0 / 60, 100, M},
		{1000.0 / 3600, 1000, H},
		{100_000.0 / 86400, 100_000, D},
		{1.0 / 7, 12342, D}, // 12342.857 a day: rounded down, never above the rate
		{1e9, 1_000_000_000, S},
		{5e9, math.MaxUint32, S}, // more than a uint32 holds: the most it can say
		{math.Nextafter(20, 21), 1728000, D},
		{0, 0, U},
		{-1, 0, U},
	} {
		rpu, unit := envoyrls.RateUnit(c.rate)
		if rpu != c.rpu || unit != c.unit {
			t.Errorf("RateUnit(%v) = %d per %v, want %d per %v", c.rate, rpu, unit, c.rpu, c.unit)
		}
	}
}
