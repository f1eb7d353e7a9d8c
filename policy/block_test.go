// The policy's block_for field: parsed, carried, every problem reported.

package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// block_for, the penalty box: a positive duration on every kind that is
// store.Kind.Blockable, carried to the store limit (but a shadow limit's);
// every problem reported with its field.
func TestBlockFor(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]time.Duration{
		"limits:\n  - {name: login, key: \"u:{u}\", capacity: 5, refill: 5/m, block_for: 10m}\n":           10 * time.Minute,
		"limits:\n  - {name: a, key: x, algorithm: sliding_window, limit: 5, window: 1m, block_for: 1h}\n": time.Hour,
		"limits:\n  - {name: a, key: x, algorithm: fixed_window, limit: 5, window: 1m, block_for: 30s}\n":  30 * time.Second,
		"limits:\n  - {name: a, key: x, algorithm: quota, limit: 5, period: day, block_for: 2d}\n":         48 * time.Hour,
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m}\n":                                       0,
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m, block_for: 10m, shadow: true}\n":         10 * time.Minute,
	} {
		p, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		l := p.Limits[0]
		if l.BlockFor != want {
			t.Errorf("%q: block_for %v, want %v", src, l.BlockFor, want)
		}
		sl := l.StoreLimit()
		if l.Shadow && sl.BlockFor != 0 || !l.Shadow && sl.BlockFor != want {
			t.Errorf("%q: store limit's block_for %v (shadow %v)", src, sl.BlockFor, l.Shadow)
		}
	}
	for src, want := range map[string]string{
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m, block_for: 0s}\n":        `field "block_for": block_for 0s must be positive`,
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m, block_for: -1m}\n":       `field "block_for": block_for -1m0s must be positive`,
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m, block_for: soon}\n":      `field "block_for": "soon" is not a duration`,
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m, block_for: 101d}\n":      `field "block_for": block_for 2424h0m0s is longer than the most, 100 days`,
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m, block_for: [1m]}\n":      `field "block_for": must be a scalar`,
		"limits:\n  - {name: a, key: x, max_in_flight: 5, lease_ttl: 1s, block_for: 1m}\n": `field "block_for": unknown field for a concurrency limit (it is a field of token_bucket, sliding_window, fixed_window and quota limits)`,
		"limits:\n  - {name: a, key: x, capacity: 5, refill: 5/m, blockfor: 1m}\n":         `field "blockfor": unknown field for a token_bucket limit (did you mean block_for?)`,
	} {
		if _, err := policy.Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant %s", src, err, want)
		}
	}
}
