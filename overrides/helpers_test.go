package overrides_test

import (
	"testing"

	"github.com/sluicehq/sluice/policy"
)

const testPolicy = `limits:
  - name: tenant_api
    key: "tenant:{tenant}:user:{user}"
    capacity: 100
    refill_per_second: 10
  - name: daily
    key: "user:{user}"
    algorithm: sliding_window
    limit: 1000
    window: 24h
  - name: export
    key: "tenant:{tenant}"
    when: {route: "/export"}
    capacity: 10
    refill_per_second: 1
  - name: monthly
    key: "tenant:{tenant}"
    algorithm: quota
    limit: 100000
    period: month
  - name: inflight
    key: "tenant:{tenant}"
    max_in_flight: 5
    lease_ttl: 30s
  - name: global
    key: "global"
    capacity: 1000
    refill_per_second: 100
`

func mustPolicy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
