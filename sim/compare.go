// Policies counted by another algorithm, for --compare: the kinds that are
// a capacity and a rate converted into one another.

package sim

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// Algorithms are the names --compare accepts: the kinds a limit can be
// counted by instead of another (store.Kind.Convertible), in the order
// kinds are listed.
var Algorithms = func() []string {
	var names []string
	for _, k := range store.Kinds() {
		if k.Convertible() {
			names = append(names, k.String())
		}
	}
	return names
}()

// As returns p with every limit whose kind is Convertible (token buckets
// and windows) counted by algorithm instead, at the same capacity and
// rate (store.Limit.As): a token bucket (B, r) becomes a window of B per
// B/r seconds (the time to refill B), and a window (N per W) becomes a
// bucket of capacity N refilled at N/W per second. Concurrency limits and
// quotas are kept.
func As(p *policy.Policy, algorithm string) (*policy.Policy, error) {
	kind, err := policy.ParseKind(algorithm)
	if err != nil || !kind.Convertible() {
		return nil, fmt.Errorf("unknown algorithm %q (want %s or %s)", algorithm,
			strings.Join(Algorithms[:len(Algorithms)-1], ", "), Algorithms[len(Algorithms)-1])
	}
	q := *p
	q.Limits = make([]*policy.Limit, len(p.Limits))
	for i, l := range p.Limits {
		c := *l
		if l.Kind.Convertible() {
			if c.Limit, err = l.Limit.As(kind); err != nil {
				return nil, fmt.Errorf("limit %q as %s: %w", l.Name, algorithm, err)
			}
		}
		q.Limits[i] = &c
	}
	return &q, nil
}
