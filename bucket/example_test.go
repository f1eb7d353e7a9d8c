package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// Admit or refuse at once, and tell refused callers when to come back.
func ExampleBucket_Allow() {
	clock := sluice.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := bucket.New(bucket.Limit{Capacity: 3, Rate: 2}, bucket.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for range 4 {
		d, _ := b.Allow(1)
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	clock.Advance(500 * time.Millisecond)
	d, _ := b.Allow(1)
	fmt.Println("after 0.5s:", d.Allowed)
	// Output:
	// allowed=true remaining=2 retry_after=0s
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=500ms
	// after 0.5s: true
}

// Weighted costs: an export costs 20 tokens, a lookup 1.
func ExampleBucket_Allow_weighted() {
	clock := sluice.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, _ := bucket.New(bucket.PerMinute(60), bucket.WithClock(clock))
	b.Allow(48) // 12 tokens left
	d, _ := b.Allow(20)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	_, err := b.Allow(61)
	fmt.Println(err)
	// Output:
	// false 12 8s
	// sluice: cost 61 exceeds capacity 60
}

// Wait blocks until the tokens are there, or fails at once when the
// context's deadline comes before them.
func ExampleBucket_Wait() {
	b, _ := bucket.New(bucket.Limit{Capacity: 1, Rate: 1000}, bucket.StartEmpty())
	if err := b.Wait(context.Background(), 1); err != nil { // about 1 ms
		panic(err)
	}
	slow, _ := bucket.New(bucket.Limit{Capacity: 1, Rate: 0.1}, bucket.StartEmpty())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := slow.Wait(ctx, 1) // needs 10 s: refused at once
	fmt.Println(errors.Is(err, sluice.ErrWaitTooLong), time.Since(start) < 100*time.Millisecond)
	// Output:
	// true true
}

// Reserve books tokens ahead; Cancel gives them back exactly.
func ExampleBucket_Reserve() {
	clock := sluice.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, _ := bucket.New(bucket.Limit{Capacity: 10, Rate: 1}, bucket.WithClock(clock), bucket.StartEmpty())
	r, _ := b.Reserve(4, time.Minute)
	fmt.Println("act in", r.Delay(), "tokens", b.Tokens())
	r.Cancel()
	fmt.Println("tokens", b.Tokens())
	// Output:
	// act in 4s tokens -4
	// tokens 0
}
