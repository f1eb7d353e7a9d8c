package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

func ExampleLimiter_Check() {
	p, err := policy.Parse([]byte(`
limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 2
    refill_per_second: 1
`))
	if err != nil {
		panic(err)
	}
	clock := sluice.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // time stands still here
	l, _ := limiter.New(p, memstore.New(memstore.WithClock(clock)))
	req := limiter.Request{Descriptors: map[string]string{"tenant": "acme"}}
	for range 3 {
		res, _ := l.Check(context.Background(), req)
		st := res.Limits[0]
		fmt.Println(res.Allowed, st.Name, st.Key, st.TokensRemaining, res.RetryAfter)
	}
	// Output:
	// true tenant_api tenant:acme 1 0s
	// true tenant_api tenant:acme 0 0s
	// false tenant_api tenant:acme 0 1s
}

// A caller deciding in a loop keeps one Result and lets CheckInto rewrite
// it: no allocation per decision on keys the store already holds.
func ExampleLimiter_CheckInto() {
	p, _ := policy.Parse([]byte(`
limits:
  - name: per_user
    key: "user:{user}"
    capacity: 100
    refill_per_second: 10
`))
	l, _ := limiter.New(p, memstore.New())
	var res limiter.Result
	admitted := 0
	for i := range 150 {
		req := limiter.Request{Descriptors: map[string]string{"user": fmt.Sprint(i % 2)}}
		if err := l.CheckInto(context.Background(), req, &res); err == nil && res.Allowed {
			admitted++
		}
	}
	fmt.Println(admitted, res.Limits[0].Key)
	// Output: 150 user:1
}
