// The example of the whole Redis stack (redisstore, lease over it, failover over that), kept here so that redisstore's module requires neither lease nor failover.
package failover_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/redisstore"
)

// Many instances, one budget: the keyed engine on Redis (redisstore.Open),
// leasing tokens for hot keys (lease.New), and enforcing each limit
// locally (at half its budget, for two instances) while Redis cannot be
// reached. (Not run: it needs a Redis.)
func ExampleNew() {
	p, err := policy.Parse([]byte(`
limits:
  - name: tenant
    key: "tenant:{tenant}"
    hash_tag: "{tenant}"
    capacity: 100
    refill_per_second: 20
`))
	if err != nil {
		log.Fatal(err)
	}
	rs, err := redisstore.Open("redis://127.0.0.1:6379/0", redisstore.WithTimeout(200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	st, err := failover.New(failover.Config{Primary: lease.New(rs), Mode: failover.Local, Instances: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	l, err := limiter.New(p, st)
	if err != nil {
		log.Fatal(err)
	}
	res, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"tenant": "acme"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed, res.Limits[0].TokensRemaining)
}
