// The example of the overrides store: one instance's API write and sync
// loop on Redis.
package redisstore_test

import (
	"context"
	"log"
	"time"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redisstore"
)

// Overrides shared by every instance on one Redis (or Redis Cluster): the
// API writes through the store, and each instance brings its Set up to
// date about once a second, one small Redis call when nothing changed.
// (Not run: it needs a Redis.)
func ExampleStore_Overrides() {
	p, err := policy.Parse([]byte(`
limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 100
    refill_per_second: 10
`))
	if err != nil {
		log.Fatal(err)
	}
	rs, err := redisstore.Open("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer rs.Close()
	st := rs.Overrides(redisstore.OverridesOptions{Max: overrides.DefaultMax})
	defer st.Close()
	set := overrides.NewSet(p)
	ctx := context.Background()

	// PUT /v1/overrides on this instance.
	o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "acme"},
		Params: overrides.Params{Capacity: 500, RefillPerSecond: 50}, TTL: 86400, Note: "trial"}
	if _, err := overrides.PutShared(ctx, set, st, o, time.Now()); err != nil {
		log.Fatal(err)
	}

	// Every instance, from one goroutine.
	for range time.Tick(time.Second) {
		if _, err := overrides.Sync(ctx, set, st); err != nil {
			log.Print(err) // (the Set keeps its overrides meanwhile)
		}
		set.Sweep(time.Now())
	}
}
