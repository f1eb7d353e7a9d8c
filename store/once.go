// Once: an event claimed once per key and period, across every instance
// sharing a store (sluice serve's alerts), and its in-process form.

package store

import (
	"context"
	"sync"
	"time"
)

// Once claims keys for a time: the first claim of a key within its ttl
// wins, every later one (from any process sharing it) loses. A store that
// instances share implements it (redisstore: SET NX PX), so that an event
// seen by many instances is acted on once.
type Once interface {
	// Claim reports whether this call is the first to claim key since
	// its last claim expired; the claim lasts ttl.
	Claim(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// MemoryOnce is a Once in process: a map of claims with their expiry,
// swept as it grows (at most Max keys held, default 100,000: beyond, the
// oldest half is dropped, so that a key may be claimed again early but
// memory stays bounded). Safe for concurrent use.
type MemoryOnce struct {
	Max int
	mu  sync.Mutex
	m   map[string]time.Time
	now func() time.Time
}

// NewMemoryOnce returns an empty MemoryOnce reading time from now (nil:
// time.Now).
func NewMemoryOnce(now func() time.Time) *MemoryOnce {
	if now == nil {
		now = time.Now
	}
	return &MemoryOnce{m: map[string]time.Time{}, now: now}
}

// Claim implements Once.
func (o *MemoryOnce) Claim(_ context.Context, key string, ttl time.Duration) (bool, error) {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if until, ok := o.m[key]; ok && now.Before(until) {
		return false, nil
	}
	max := o.Max
	if max <= 0 {
		max = 100_000
	}
	if len(o.m) >= max {
		o.sweep(now, max/2)
	}
	o.m[key] = now.Add(ttl)
	return true, nil
}

// sweep drops expired claims, then, while more than keep remain, the
// earliest to expire.
func (o *MemoryOnce) sweep(now time.Time, keep int) {
	for k, until := range o.m {
		if !now.Before(until) {
			delete(o.m, k)
		}
	}
	for len(o.m) > keep {
		var oldest string
		var at time.Time
		for k, until := range o.m {
			if oldest == "" || until.Before(at) {
				oldest, at = k, until
			}
		}
		delete(o.m, oldest)
	}
}
