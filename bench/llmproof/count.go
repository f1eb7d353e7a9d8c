// A store.Store wrapper counting the gate's store calls by operation, for
// the row's breakdown of its Redis calls.

package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/store"
)

// counted counts the calls made through it (Take refused or admitted,
// Adjust, AdjustRelease, Release, Renew); it passes every optional
// interface the gate uses (AdjustReleaser, Renewer) through.
type counted struct {
	store.Store
	take, refused, adjust, adjustRelease, release, renew atomic.Int64
	scriptReleases                                       atomic.Int64
}

// Calls are a worker's store calls by operation.
type Calls struct {
	Take          int64 `json:"take"`
	TakeRefused   int64 `json:"take_refused"`
	Adjust        int64 `json:"adjust"`
	AdjustRelease int64 `json:"adjust_release"`
	Release       int64 `json:"release"`
	Renew         int64 `json:"renew"`
	// ScriptReleases counts the slots an AdjustRelease freed inside
	// redisstore's adjust script (with adjustments to apply: a ZREM that
	// INFO commandstats counts, but no client call of its own).
	ScriptReleases int64 `json:"script_releases"`
}

func (c *counted) calls() Calls {
	return Calls{Take: c.take.Load(), TakeRefused: c.refused.Load(), Adjust: c.adjust.Load(),
		AdjustRelease: c.adjustRelease.Load(), Release: c.release.Load(), Renew: c.renew.Load(),
		ScriptReleases: c.scriptReleases.Load()}
}

func (c *Calls) add(o Calls) {
	c.Take += o.Take
	c.TakeRefused += o.TakeRefused
	c.Adjust += o.Adjust
	c.AdjustRelease += o.AdjustRelease
	c.Release += o.Release
	c.Renew += o.Renew
	c.ScriptReleases += o.ScriptReleases
}

func (c *counted) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	c.take.Add(1)
	r, err := c.Store.Take(ctx, items)
	if err == nil && !r.Allowed {
		c.refused.Add(1)
	}
	return r, err
}

func (c *counted) Adjust(ctx context.Context, adj []store.Adjustment) error {
	c.adjust.Add(1)
	return c.Store.Adjust(ctx, adj)
}

func (c *counted) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	c.adjustRelease.Add(1)
	for _, a := range adj {
		if a.Op() != 0 && slots.ID != "" {
			c.scriptReleases.Add(int64(len(slots.Keys)))
			break
		}
	}
	return store.AdjustRelease(ctx, c.Store, adj, slots)
}

func (c *counted) Release(ctx context.Context, slots store.Slots) error {
	c.release.Add(1)
	return c.Store.Release(ctx, slots)
}

func (c *counted) CanRenew() bool { return store.CanRenew(c.Store) }

func (c *counted) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	c.renew.Add(1)
	return store.Renew(ctx, c.Store, slots, ttl)
}
