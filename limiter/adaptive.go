// Adaptive limits (policy.Limit.Adaptive): each key's refill a ceiling
// that learns from feedback (Feedback), kept in the store next to the
// key's bucket, and checks decided under it.

package limiter

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// AdaptiveLevels is the number of steps of an adaptive ceiling between its
// min_refill_per_second and the limit's refill_per_second (as
// gate.AdaptiveLevels): a step is refill_per_second/AdaptiveLevels.
const AdaptiveLevels = 1000

// adaptiveLimit is an adaptive limit's ceilings. A key's ceiling is kept
// in the store as a token bucket of its own whose tokens are the steps
// above the minimum and whose refill is the climb (so that it climbs back
// by increase_per_second without anyone writing it), under the key's
// store key with the suffix "\x00adaptive", in the key's hash slot; an
// overload takes the one token of a bucket refilling once per cooldown
// ("\x00adaptive_cooldown") and lowers the ceiling's tokens (an atomic
// ceiling, store.Adjustment.Lower). A check peeks at the ceiling in its
// own Take and decides the key under the spec of the level this process
// read last (store.Item.Base: the state converted by the SetLimit rule,
// no burst), so that a lowered ceiling applies from the next check of the
// key on every instance.
type adaptiveLimit struct {
	a            policy.Adaptive
	base         *store.Spec
	burst        int64
	q            float64
	levels       int64
	dspec, cspec *store.Spec
	mu           sync.Mutex
	specs        map[int64]*store.Spec
	known        sync.Map // store key → int64 level, as last read
	nknown       atomic.Int64
	last         atomic.Uint64 // the ceiling last read, of any key (math.Float64bits; 0: none)
}

// maxKnown bounds the levels a limit remembers (beyond it they are read
// again from the store: a key's first check after is decided at the
// ceiling's Max, its second at the level read).
const maxKnown = 1 << 16

// newAdaptives makes the ceilings of p's adaptive limits (nil: none).
func newAdaptives(p *policy.Policy, specs []*store.Spec) ([]*adaptiveLimit, error) {
	var out []*adaptiveLimit
	for i, lim := range p.Limits {
		if lim.Adaptive == nil || !specs[i].Kind.Adaptable() {
			continue
		}
		if out == nil {
			out = make([]*adaptiveLimit, len(p.Limits))
		}
		l := specs[i].Bucket.Limit()
		a := &adaptiveLimit{a: *lim.Adaptive, base: specs[i], burst: l.Capacity, q: l.Rate / AdaptiveLevels, specs: map[int64]*store.Spec{}}
		a.levels = int64((l.Rate - a.a.MinRefill) / a.q)
		var err error
		if a.dspec, err = store.NewBucketSpec(bucket.Limit{Capacity: max(a.levels, 1), Rate: a.a.Increase / a.q}); err != nil {
			return nil, fmt.Errorf("limiter: limit %q: adaptive: %w", lim.Name, err)
		}
		if a.cspec, err = store.NewBucketSpec(bucket.Limit{Capacity: 1, Rate: 1 / max(a.a.Cooldown.Seconds(), 1e-9)}); err != nil {
			return nil, fmt.Errorf("limiter: limit %q: adaptive: %w", lim.Name, err)
		}
		out[i] = a
	}
	return out, nil
}

// rate is a level's refill.
func (a *adaptiveLimit) rate(level int64) float64 {
	return a.a.MinRefill + float64(min(max(level, 0), a.levels))*a.q
}

// level is the level of key as last read (a key not read yet: the top).
func (a *adaptiveLimit) level(key string) int64 {
	if v, ok := a.known.Load(key); ok {
		return v.(int64)
	}
	return a.levels
}

// note records key's level.
func (a *adaptiveLimit) note(key string, level int64) {
	a.last.Store(math.Float64bits(a.rate(level)))
	if _, loaded := a.known.Swap(key, level); !loaded && a.nknown.Add(1) > maxKnown {
		a.known.Clear()
		a.nknown.Store(0)
	}
}

// specAt is the spec of a level (made once per level).
func (a *adaptiveLimit) specAt(level int64) *store.Spec {
	if level >= a.levels && a.rate(level) == a.base.Bucket.Limit().Rate {
		return a.base
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	sp := a.specs[level]
	if sp == nil {
		var err error
		if sp, err = store.NewBucketSpec(bucket.Limit{Capacity: a.burst, Rate: a.rate(level)}); err != nil {
			return a.base
		}
		a.specs[level] = sp
	}
	return sp
}

// ceilingKey is the store key of key's ceiling (suffix "adaptive") or
// cooldown, in key's hash slot: key's own hash tag, or key made one.
func ceilingKey(key, suffix string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			return key + "\x00" + suffix
		}
	}
	return "{" + key + "}\x00" + suffix
}

// adaptItems sets the spec of each item of an adaptive limit (not decided
// by an override's spec) to its key's ceiling, and returns the peeks at
// those ceilings (nil: none) and, per peek, its item.
func (c *compiled) adaptItems(items []store.Item, which []int) (peeks []store.Item, of []int) {
	for j := range items {
		a := c.adapt[which[j]]
		if a == nil || items[j].Base != nil || items[j].Spec != a.base {
			continue
		}
		items[j].Spec, items[j].Base = a.specAt(a.level(items[j].Key)), a.base
		peeks = append(peeks, store.Item{Key: ceilingKey(items[j].Key, "adaptive"), Spec: a.dspec, MaxWait: items[j].MaxWait})
		of = append(of, j)
	}
	return peeks, of
}

// adaptives makes c's adaptive ceilings (c.adapt; nil: none).
func (c *compiled) adaptives() (err error) {
	c.adapt, err = newAdaptives(c.p, c.specs)
	return err
}

// takeAdaptive is take for a policy with adaptive limits: on its fast
// path the ceilings are peeked in the check's own Take; otherwise (shadow
// limits, overrides that skip the store) in a Take of their own after it.
func (l *Limiter) takeAdaptive(ctx context.Context, c *compiled, items []store.Item, which []int, rules []*overrides.Rule, borrows bool, now *time.Time) (store.Result, error) {
	plain := *c
	plain.adapt = nil
	take := func(its []store.Item) (store.Result, error) {
		return l.take(ctx, &plain, its, which, rules, borrows, now)
	}
	odd := c.anyShadow || rules != nil
	peeks, of := c.adaptItems(items, which)
	if len(peeks) == 0 {
		return take(items)
	}
	if odd {
		r, err := take(items)
		if err == nil {
			if _, perr := l.st.Take(ctx, peeks); perr == nil {
				c.notePeeks(items, which, peeks, of)
			}
		}
		return r, err
	}
	n := len(items)
	ext := append(append(make([]store.Item, 0, n+len(peeks)), items...), peeks...)
	r, err := take(ext)
	copy(items, ext[:n])
	if err == nil {
		c.notePeeks(items, which, ext[n:], of)
	}
	return r, err
}

// notePeeks records the levels the peeks read.
func (c *compiled) notePeeks(items []store.Item, which []int, peeks []store.Item, of []int) {
	for k, j := range of {
		c.adapt[which[j]].note(items[j].Key, peeks[k].Decision.Remaining)
	}
}

// adaptStatus fills the statuses of adaptive limits' items with the
// ceiling they were decided under.
func (c *compiled) adaptStatus(limits []LimitStatus, items []store.Item, which []int) {
	for j := range items {
		if a := c.adapt[which[j]]; a != nil && a.owns(items[j].Spec) {
			limits[j].AdaptiveRefill = items[j].Spec.Bucket.Limit().Rate
		}
	}
}

// owns reports whether sp is a spec of one of a's levels.
func (a *adaptiveLimit) owns(sp *store.Spec) bool {
	if sp == a.base {
		return true
	}
	if !sp.Kind.Adaptable() {
		return false
	}
	lvl := int64((sp.Bucket.Limit().Rate-a.a.MinRefill)/a.q + 0.5)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.specs[lvl] == sp
}
