package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redisstore"
)

// A pause reported to one instance holds on another sharing the Redis:
// its checks are refused until the pause ends, and after it the bucket
// refills from empty (two limiters, each with its own client; Redis's
// clock).
func TestPauseAcrossInstances(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: rpm
    key: "api_key:{api_key}"
    capacity: 10
    refill: "10/s"
`))
	if err != nil {
		t.Fatal(err)
	}
	prefix := prefix()
	a, err := limiter.New(p, open(t, redisstore.WithPrefix(prefix)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := limiter.New(p, open(t, redisstore.WithPrefix(prefix)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := map[string]string{"api_key": "k"}
	if res, _ := b.Check(ctx, limiter.Request{Descriptors: d}); !res.Allowed {
		t.Fatalf("before: %+v", res)
	}
	start := time.Now()
	if _, err := a.Pause(ctx, d, 800*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	res, err := b.Check(ctx, limiter.Request{Descriptors: d})
	if err != nil || res.Allowed {
		t.Fatalf("instance b during a's pause: %+v %v", res, err)
	}
	// RetryAfter is the pause's rest plus one token's refill (100 ms),
	// measured on Redis's clock: within what has elapsed here since.
	if max, min := 900*time.Millisecond, 900*time.Millisecond-time.Since(start); res.RetryAfter > max || res.RetryAfter < min {
		t.Fatalf("RetryAfter %v, want in [%v, %v]", res.RetryAfter, min, max)
	}
	time.Sleep(res.RetryAfter)
	res, _ = b.Check(ctx, limiter.Request{Descriptors: d})
	if !res.Allowed || res.Limits[0].TokensRemaining > 6 { // (up to 500 ms of scheduling slack: 10 were left before)
		t.Fatalf("after the pause the bucket refills from empty (at most a few tokens, not 10): %+v", res)
	}
}
