// Example traces: pulse, steady and burst (Generate).

package sim

import (
	"fmt"
	"math"
)

// GenerateOptions shape a generated trace.
type GenerateOptions struct {
	N           int               // pulse: requests at t=0; burst: requests per burst
	Rate        float64           // steady: requests per second
	Duration    float64           // seconds (steady, burst)
	Period      float64           // burst: seconds between bursts
	MaxWaitMS   int64             // every request's max_wait_ms
	Descriptors map[string]string // every request's descriptors
}

// Generate returns an example trace: "pulse" (N simultaneous requests, the
// reference scenario of docs/behaviour.md section 3), "steady" (Rate per second, evenly spaced,
// for Duration) or "burst" (N at once every Period, for Duration).
func Generate(kind string, o GenerateOptions) ([]Event, error) {
	mk := func(t float64) Event {
		return Event{T: math.Round(t*1e9) / 1e9, Descriptors: o.Descriptors, MaxWaitMS: o.MaxWaitMS}
	}
	var evs []Event
	switch kind {
	case "pulse":
		if o.N < 1 || o.N > 10_000_000 {
			return nil, fmt.Errorf("pulse needs --n between 1 and 10000000")
		}
		for range o.N {
			evs = append(evs, mk(0))
		}
	case "steady":
		if o.Rate <= 0 || o.Duration <= 0 || o.Rate*o.Duration > 10_000_000 {
			return nil, fmt.Errorf("steady needs --rate > 0 and --duration > 0 (at most 10000000 requests)")
		}
		n := int(o.Rate * o.Duration)
		for i := range n {
			evs = append(evs, mk(float64(i)/o.Rate))
		}
	case "burst":
		if o.N < 1 || o.Period <= 0 || o.Duration <= 0 || float64(o.N)*o.Duration/o.Period > 10_000_000 {
			return nil, fmt.Errorf("burst needs --n >= 1, --period > 0 and --duration > 0 (at most 10000000 requests)")
		}
		for t := 0.0; t < o.Duration; t += o.Period {
			for range o.N {
				evs = append(evs, mk(t))
			}
		}
	default:
		return nil, fmt.Errorf("unknown trace kind %q (want pulse, steady or burst)", kind)
	}
	return evs, nil
}
