package window_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/window"
)

func ExampleNewSliding() {
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	s, _ := window.NewSliding(window.Limit{Limit: 100, Window: time.Minute}, window.WithClock(clock))
	d, _ := s.Allow(100)
	fmt.Println(d.Allowed, d.Remaining)
	clock.Advance(90 * time.Second) // half of the previous window still counts
	d, _ = s.Allow(60)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	// Output:
	// true 0
	// false 50 6s
}
