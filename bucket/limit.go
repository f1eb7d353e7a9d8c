package bucket

import (
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Limit describes a token bucket: it holds at most Capacity tokens (the
// largest burst) and gains Rate tokens per second, continuously.
type Limit struct {
	// Capacity is B, the largest burst in tokens. It must be >= 1.
	Capacity int64
	// Rate is r, the refill rate in tokens per second. It must be > 0 and
	// finite.
	Rate float64
}

// PerSecond returns the limit of n tokens per second with a burst of n
// (the shape of redis_rate's PerSecond).
func PerSecond(n int64) Limit { return Limit{Capacity: n, Rate: float64(n)} }

// PerMinute returns the limit of n tokens per minute with a burst of n.
func PerMinute(n int64) Limit { return Limit{Capacity: n, Rate: float64(n) / 60} }

// PerHour returns the limit of n tokens per hour with a burst of n.
func PerHour(n int64) Limit { return Limit{Capacity: n, Rate: float64(n) / 3600} }

// Every returns the limit of one token every d with a burst of 1; raise the
// burst with WithCapacity. A d <= 0 gives a limit that New rejects.
func Every(d time.Duration) Limit {
	if d <= 0 {
		return Limit{Capacity: 1, Rate: math.Inf(1)}
	}
	return Limit{Capacity: 1, Rate: float64(time.Second) / float64(d)}
}

// WithCapacity returns l with its capacity (burst) set to c.
func (l Limit) WithCapacity(c int64) Limit { l.Capacity = c; return l }

// String formats l as "capacity 10, 2/s".
func (l Limit) String() string {
	return "capacity " + strconv.FormatInt(l.Capacity, 10) + ", " + strconv.FormatFloat(l.Rate, 'g', -1, 64) + "/s"
}

// Validate reports whether l can be represented exactly; the error matches
// sluice.ErrInvalidLimit and says which number is wrong.
func (l Limit) Validate() error {
	_, err := Compile(l)
	return err
}

func invalid(format string, args ...any) error {
	return sluice.Errorf(sluice.ErrInvalidLimit, format, args...)
}

func costError(cost, capacity int64) error {
	if cost < 0 {
		return sluice.Errorf(sluice.ErrInvalidCost, "cost %d is negative", cost)
	}
	return sluice.Errorf(sluice.ErrCostExceedsCapacity, "cost %d exceeds capacity %d", cost, capacity)
}

// CheckCost returns nil when 0 <= cost <= capacity, else an error matching
// sluice.ErrInvalidCost or sluice.ErrCostExceedsCapacity with the numbers.
func CheckCost(cost, capacity int64) error {
	if cost < 0 || cost > capacity {
		return costError(cost, capacity)
	}
	return nil
}
