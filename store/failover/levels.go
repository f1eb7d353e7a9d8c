// Local mode's levels: the shared level last seen per key, the local
// buckets seeded from it, and the levels handed back to the primary.
package failover

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store"
)

// levels is what local mode keeps of Pausable kinds' states (token
// buckets; other kinds start their local state new). seen holds, per key,
// the remaining the primary reported at its last decision on this
// instance (at most max keys: past it, new keys are not remembered and
// start their local bucket full); used holds the keys decided locally in
// the current outage.
type levels struct {
	max  int
	mu   sync.Mutex
	seen map[string]level
	used map[string]*store.Spec
}

// level is a shared bucket's remaining tokens at a time (Unix ns, this
// instance's clock).
type level struct {
	remaining int64
	at        int64
}

// defaultMaxLevels bounds seen when Config.MaxKeys is 0 (memstore's
// default cap).
const defaultMaxLevels = 1_000_000

func (l *levels) init(maxKeys int) {
	l.max = maxKeys
	if l.max <= 0 {
		l.max = defaultMaxLevels
	}
	l.seen = map[string]level{}
	l.used = map[string]*store.Spec{}
}

// tracked reports whether local mode keeps sp's level: a Pausable kind's
// (one that takes a ceiling, store.Adjustment.Lower), in local mode.
func (s *Store) tracked(sp *store.Spec) bool {
	return sp.Kind.Pausable() && s.mode(sp) == Local
}

// observe remembers the level of each local-mode token bucket the primary
// just decided.
func (l *levels) observe(s *Store, items []store.Item) {
	now := int64(-1)
	for i := range items {
		it := &items[i]
		if !s.tracked(it.Spec) {
			continue
		}
		if now < 0 {
			now = time.Now().UnixNano()
			l.mu.Lock()
			defer l.mu.Unlock()
		}
		if _, ok := l.seen[it.Key]; ok || len(l.seen) < l.max {
			l.seen[it.Key] = level{remaining: it.Decision.Remaining, at: now}
		}
	}
}

// newOutage starts an outage: no key decided locally yet.
func (l *levels) newOutage() {
	l.mu.Lock()
	clear(l.used)
	l.mu.Unlock()
}

// endOutage forgets the keys decided locally, once handed back.
func (l *levels) endOutage() { l.newOutage() }

// seed, at the first local decision of a key in an outage, lowers its
// local bucket to this instance's share of the level last seen on the
// primary, refilled since at the limit's rate: floor(min(capacity,
// remaining + rate*elapsed) / Instances). The local bucket is only ever
// lowered (store.Adjustment.Lower), never raised. local are the items as
// the local store decides them (scaled), at their places in items.
func (l *levels) seed(ctx context.Context, s *Store, items []store.Item, at []int, local []store.Item) {
	var adj []store.Adjustment
	l.mu.Lock()
	defer l.mu.Unlock()
	for j, i := range at {
		it := &items[i]
		if !s.tracked(it.Spec) {
			continue
		}
		if _, ok := l.used[it.Key]; ok {
			continue
		}
		l.used[it.Key] = it.Spec
		lv, ok := l.seen[it.Key]
		if !ok {
			continue
		}
		est := float64(lv.remaining) + it.Spec.Rate()*time.Duration(time.Now().UnixNano()-lv.at).Seconds()
		est = math.Min(est, float64(it.Spec.Capacity()))
		share := int64(math.Floor(est / float64(s.cfg.Instances)))
		if share < local[j].Spec.Capacity() {
			adj = append(adj, store.Adjustment{Key: it.Key, Spec: local[j].Spec, Lower: true, Delta: max(share, 0)})
		}
	}
	if len(adj) > 0 {
		s.local.Adjust(ctx, adj) // under l.mu: no local decision on these keys before it
	}
}

// lowerings are the adjustments that hand the local levels back: each key
// decided locally in this outage lowered on the primary to Instances
// times what its local bucket holds now.
func (l *levels) lowerings(s *Store) []store.Adjustment {
	l.mu.Lock()
	defer l.mu.Unlock()
	adj := make([]store.Adjustment, 0, len(l.used))
	for key, sp := range l.used {
		peek := []store.Item{{Key: key, Spec: s.scale(sp)}}
		if _, err := s.local.Take(context.Background(), peek); err != nil {
			continue
		}
		adj = append(adj, store.Adjustment{Key: key, Spec: sp, Lower: true, Delta: peek[0].Decision.Remaining * int64(s.cfg.Instances)})
	}
	return adj
}
