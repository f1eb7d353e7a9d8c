// Comparing algorithms: a policy's limits counted by another kind (As, Algorithms).

package sim

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// Algorithms are the names --compare accepts: the kinds a limit can be
// counted by instead of another.
var Algorithms = []string{policy.TokenBucket.String(), policy.SlidingWindow.String(), policy.FixedWindow.String()}

// convertible reports whether As counts limits of kind k by another
// algorithm (in-flight caps and calendar quotas are kept as they are).
func convertible(k policy.Kind) bool {
	return k == policy.TokenBucket || k == policy.SlidingWindow || k == policy.FixedWindow
}

// As returns p with every token-bucket and window limit counted by
// algorithm instead, at the same capacity and rate: a token bucket (B, r)
// becomes a window of B per B/r seconds (the time to refill B), and a
// window (N per W) becomes a bucket of capacity N refilled at N/W per
// second. Concurrency limits and quotas are kept.
func As(p *policy.Policy, algorithm string) (*policy.Policy, error) {
	kind, err := policy.ParseKind(algorithm)
	if err != nil || !convertible(kind) {
		return nil, fmt.Errorf("unknown algorithm %q (want token_bucket, sliding_window or fixed_window)", algorithm)
	}
	q := *p
	q.Limits = make([]*policy.Limit, len(p.Limits))
	for i, l := range p.Limits {
		c := *l
		switch {
		case !convertible(l.Kind) || l.Kind == kind:
		case kind == policy.TokenBucket:
			c.Bucket.Capacity = l.Window.Limit
			c.Bucket.Rate = float64(l.Window.Limit) / l.Window.Window.Seconds()
		default:
			b := l.Bucket
			if l.Kind != policy.TokenBucket {
				b.Capacity, b.Rate = l.Window.Limit, float64(l.Window.Limit)/l.Window.Window.Seconds()
			}
			c.Window = window.Limit{Limit: b.Capacity, Window: time.Duration(float64(b.Capacity) / b.Rate * 1e9)}
			if err := c.Window.Validate(); err != nil {
				return nil, fmt.Errorf("limit %q as %s: %w", l.Name, algorithm, err)
			}
		}
		if convertible(l.Kind) {
			c.Kind = kind
		}
		q.Limits[i] = &c
	}
	return &q, nil
}
