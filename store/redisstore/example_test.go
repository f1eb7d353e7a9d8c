// The example of redisstore alone (with leasing and failover over it: store/failover's ExampleNew).
package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redisstore"
)

// Many instances, one budget: the keyed engine on Redis. Leasing tokens
// for hot keys and a defined behaviour while Redis cannot be reached are
// layers over it: see store/failover's ExampleNew. (Not run: it needs a
// Redis.)
func ExampleOpen() {
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
	defer rs.Close()
	l, err := limiter.New(p, rs)
	if err != nil {
		log.Fatal(err)
	}
	res, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{"tenant": "acme"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed, res.Limits[0].TokensRemaining)
}
