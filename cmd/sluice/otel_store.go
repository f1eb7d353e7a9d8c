// --otel's store wrapper: a child span per store call (Take, Adjust,
// Release, Renew) of the span in the caller's context.

package main

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/tracing"
)

// traceStore wraps st in a store whose calls made under a span (a
// traced request's context) are spans of their own, "sluice.store.take"
// and so on, with sluice.store.items, sluice.store.latency_ms and, while
// the failover circuit is open, sluice.store.degraded and
// sluice.fail_mode (the on_store_error modes the items fell back to).
// Calls without a sampled span in their context go straight to st. Without
// --otel st is returned as it is.
func (s *service) traceStore(st store.Store, fo *failover.Store, defaultMode string) store.Store {
	t := s.tracer()
	if t == nil {
		return st
	}
	ts := &tracedStore{inner: st, t: t, fo: fo, mode: defaultMode}
	if kb, ok := st.(memTraced); ok {
		return &tracedMemStore{tracedStore: ts, mem: kb}
	}
	return ts
}

// memTraced is what the in-process store offers beyond store.Store, which
// the limiter and the metrics look for.
type memTraced interface {
	store.KeyBorrower
	store.StatsReporter
	EvictionsByReason() (idle, lru uint64)
}

type tracedStore struct {
	inner store.Store
	t     tracing.Tracer
	fo    *failover.Store // nil in memory
	mode  string          // --on-store-error
}

// start begins a store call's span under ctx's, or reports false when ctx
// has none (the call is not traced).
func (s *tracedStore) start(ctx context.Context, name string, n int) (context.Context, tracing.Span, time.Time, bool) {
	if p := tracing.FromContext(ctx); p == nil || !p.Recording() {
		return ctx, nil, time.Time{}, false // (a child of an unsampled span would not be sampled)
	}
	ctx, sp := s.t.Start(ctx, name, tracing.Client, nil)
	if sp.Recording() {
		sp.SetAttributes(tracing.Int("sluice.store.items", int64(n)))
	}
	return ctx, sp, time.Now(), true
}

// end closes a store call's span with its latency, error and fail mode.
func (s *tracedStore) end(sp tracing.Span, began time.Time, items []store.Item, err error) {
	if sp.Recording() {
		attrs := []tracing.Attr{tracing.Float("sluice.store.latency_ms", float64(time.Since(began).Microseconds())/1000)}
		if s.fo != nil && s.fo.Degraded() {
			var modes []string
			for _, it := range items {
				m := s.mode
				if it.Spec != nil && it.Spec.OnStoreError != "" {
					m = it.Spec.OnStoreError
				}
				if !slices.Contains(modes, m) {
					modes = append(modes, m)
				}
			}
			attrs = append(attrs, tracing.Bool("sluice.store.degraded", true), tracing.Strings("sluice.fail_mode", modes))
		}
		sp.SetAttributes(attrs...)
		if err != nil {
			sp.SetError(err.Error())
		}
	}
	sp.End()
}

func (s *tracedStore) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	ctx, sp, began, ok := s.start(ctx, "sluice.store.take", len(items))
	if !ok {
		return s.inner.Take(ctx, items)
	}
	r, err := s.inner.Take(ctx, items)
	s.end(sp, began, items, err)
	return r, err
}

func (s *tracedStore) Adjust(ctx context.Context, adj []store.Adjustment) error {
	ctx, sp, began, ok := s.start(ctx, "sluice.store.adjust", len(adj))
	if !ok {
		return s.inner.Adjust(ctx, adj)
	}
	err := s.inner.Adjust(ctx, adj)
	s.end(sp, began, nil, err)
	return err
}

func (s *tracedStore) Release(ctx context.Context, slots store.Slots) error {
	ctx, sp, began, ok := s.start(ctx, "sluice.store.release", len(slots.Keys))
	if !ok {
		return s.inner.Release(ctx, slots)
	}
	err := s.inner.Release(ctx, slots)
	s.end(sp, began, nil, err)
	return err
}

func (s *tracedStore) Close() error { return s.inner.Close() }

// ConvertsSpecs answers for the store it wraps (store.SpecConverter).
func (s *tracedStore) ConvertsSpecs() bool {
	c, ok := s.inner.(store.SpecConverter)
	return ok && c.ConvertsSpecs()
}

// CanRenew and Renew answer for the store it wraps (store.Renewer).
func (s *tracedStore) CanRenew() bool { return store.CanRenew(s.inner) }

func (s *tracedStore) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	r, ok := s.inner.(store.Renewer)
	if !ok {
		return store.ErrCannotRenew
	}
	return r.Renew(ctx, slots, ttl)
}

// tracedMemStore is tracedStore over the in-process store, keeping what
// the limiter and the metrics find on it.
type tracedMemStore struct {
	*tracedStore
	mem memTraced
}

func (s *tracedMemStore) TakeBorrowed(ctx context.Context, items []store.Item) (store.Result, error) {
	ctx, sp, began, ok := s.start(ctx, "sluice.store.take", len(items))
	if !ok {
		return s.mem.TakeBorrowed(ctx, items)
	}
	r, err := s.mem.TakeBorrowed(ctx, items)
	s.end(sp, began, items, err)
	return r, err
}

func (s *tracedMemStore) Stats() store.Stats                    { return s.mem.Stats() }
func (s *tracedMemStore) EvictionsByReason() (idle, lru uint64) { return s.mem.EvictionsByReason() }
