package overrides_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
)

// Tiers as overrides: a trial that expires, a prefix for premium keys, and
// a blocked key.
func ExampleSet_Resolve() {
	p, _ := policy.Parse([]byte(`limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 100
    refill_per_second: 10
`))
	s := overrides.NewSet(p)
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, body := range []string{
		`{"name": "tenant_api", "match": {"tenant": "acme"}, "capacity": 500, "refill_per_second": 50, "ttl_s": 86400, "note": "trial"}`,
		`{"name": "tenant_api", "match": {"tenant": "premium_*"}, "capacity": 1000, "refill": "6000/m"}`,
		`{"name": "tenant_api", "match": {"tenant": "mallory"}, "deny": true}`,
	} {
		o, err := overrides.DecodeRequest([]byte(body))
		if err != nil {
			panic(err)
		}
		o.Stamp(now, time.Time{})
		if err := s.Put(o); err != nil {
			panic(err)
		}
	}
	for _, tenant := range []string{"acme", "premium_7", "mallory", "other"} {
		r := s.Resolve("tenant_api", map[string]string{"tenant": tenant}, now)
		switch {
		case r == nil:
			fmt.Printf("%s: the policy's limit\n", tenant)
		case r.Deny():
			fmt.Printf("%s: denied by %s\n", tenant, r.CanonicalMatch())
		default:
			fmt.Printf("%s: capacity %d, %v/s by %s\n", tenant, r.Limit().Bucket.Capacity, r.Limit().Bucket.Rate, r.CanonicalMatch())
		}
	}
	fmt.Println(s.Resolve("tenant_api", map[string]string{"tenant": "acme"}, now.Add(24*time.Hour)) == nil)
	// Output:
	// acme: capacity 500, 50/s by {"tenant":"acme"}
	// premium_7: capacity 1000, 100/s by {"tenant":"premium_*"}
	// mallory: denied by {"tenant":"mallory"}
	// other: the policy's limit
	// true
}
