// Limit, what a token bucket holds and gains, and its constructors (PerSecond, Every, RatePer, ...).

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

// periods are the periods RatePer recognises, in seconds: second, minute,
// hour, day, week, 30-day month, 365-day year (Envoy's units).
var periods = [...]int64{1, 60, 3600, 86400, 7 * 86400, 30 * 86400, 365 * 86400}

// RatePer returns the exact rate the limit stands for as n tokens per per,
// and ok, when Rate is the float64 nearest to such a fraction written the
// way PerSecond, PerMinute, PerHour and Every write it: n/p for a whole
// n >= 1 and p one of 1 s, 1 min, 1 h, 1 day, 7 days, 30 days or 365 days
// (the first that fits), or 1 per d for a whole number of nanoseconds d.
// Compile uses that fraction instead of the float's own binary value, so
// PerMinute(100), a policy's refill "100/m" and Envoy's 100 per MINUTE are
// exactly 100 tokens a minute. Another float (0.7000000000000001, a
// measured rate) is taken at its exact binary value and ok is false. The
// two differ by less than half a unit in the last place of Rate.
func (l Limit) RatePer() (n int64, per time.Duration, ok bool) {
	r := l.Rate
	if !(r > 0) || math.IsInf(r, 0) {
		return 0, 0, false
	}
	for _, p := range periods {
		x := math.Round(r * float64(p))
		if x >= 1 && x < 1<<53 && x/float64(p) == r {
			return int64(x), time.Duration(p) * time.Second, true
		}
	}
	if r <= 1e9 {
		d := math.Round(1e9 / r)
		if d >= 1 && d < 1<<62 && float64(time.Second)/d == r {
			return 1, time.Duration(d), true
		}
	}
	return 0, 0, false
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
