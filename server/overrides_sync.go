// Keeping /v1/overrides' Set in step with their store (the sync loop), and
// the sluice_overrides gauge.

package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/overrides"
)

// SyncOverridesNow applies the overrides store's changes to the Set once
// (overrides.Sync), then removes the expired overrides (Set.Sweep). It is
// serialized with the API's writes of this server, so that a Sync never
// undoes a PUT or DELETE answered here. Overrides the policy refuses are
// logged (held inactive); the store's error is returned. Without
// Config.Overrides it does nothing.
func (s *Server) SyncOverridesNow(ctx context.Context) error {
	set, st := s.cfg.Overrides, s.cfg.OverrideStore
	if set == nil || st == nil {
		return nil
	}
	s.ovMu.Lock()
	// Expired overrides are swept (and recorded) before the store's
	// state, which no longer holds them, is read.
	expired := set.SweepExpired(time.Now())
	problems, err := overrides.Sync(ctx, set, st)
	s.ovMu.Unlock()
	for _, o := range expired {
		s.Audit(ctx, ActorSystem, "override_expire", "ttl", "", o)
	}
	for _, p := range problems {
		s.cfg.Logger.Warn("override held inactive: the policy in force refuses it", "error", p.Error())
	}
	set.Sweep(time.Now())
	return err
}

// OverridesWatcher is an overrides.Store that announces its changes
// (store/redisstore's Overrides): Watch calls changed, without blocking,
// soon after each change made through any instance and each time its
// announcements (re)start, and failed with the error each time they stop;
// it returns when ctx is done or the store is closed.
type OverridesWatcher interface {
	Watch(ctx context.Context, changed func(), failed func(error)) error
}

// watchGap is the least time between two syncs an announcement starts: a
// burst of changes costs an instance at most one store call per gap.
const watchGap = 50 * time.Millisecond

// SyncOverrides keeps the Set in step with the store until ctx is done or
// the store is closed: it calls SyncOverridesNow once period has passed
// since its last call (the first after one period), and, when the store
// is an OverridesWatcher, at once after an announcement (but watchGap
// after the previous call at the earliest; the announcements that arrive
// meanwhile are read by that one call). It logs the store's errors and
// the announcements' failures (at most a few a second).
//
// So an override set through another instance applies here within the
// announcement's delivery and one store call (a few milliseconds on one
// network) and, when announcements are lost (a subscription dropped,
// Redis restarting), within period and one store call; with nothing
// changing, an instance makes one store call per period. One that
// expires stops applying at its expiry exactly, whether or not it has
// been swept.
func (s *Server) SyncOverrides(ctx context.Context, period time.Duration) {
	wake := make(chan struct{}, 1)
	if w, ok := s.cfg.OverrideStore.(OverridesWatcher); ok && s.cfg.Overrides != nil {
		watchLog := ratelog.New(s.cfg.Logger, slog.LevelWarn,
			"overrides announcements not received: changes through other instances apply here at the next poll")
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			_ = w.Watch(wctx, func() {
				select {
				case wake <- struct{}{}:
				default: // (a sync is due already)
				}
			}, func(err error) {
				if wctx.Err() == nil {
					watchLog.Log(slog.String("error", err.Error()))
				}
			})
		}()
	}
	t := time.NewTimer(period)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
			if d := time.Since(last); d < watchGap {
				select {
				case <-ctx.Done():
					return
				case <-time.After(watchGap - d):
				}
			}
		}
		select {
		case <-wake: // (announced before this read starts: it reads that change too)
		default:
		}
		err := s.SyncOverridesNow(ctx)
		last = time.Now()
		t.Reset(period)
		switch {
		case err == nil:
		case errors.Is(err, overrides.ErrClosed):
			return // (the store closed: the service is stopping)
		case ctx.Err() == nil:
			s.syncLog.Log(slog.String("error", err.Error()))
		}
	}
}

var overridesDesc = prometheus.NewDesc("sluice_overrides",
	"Overrides held per policy limit (set through /v1/overrides or listed in the policy file; an expired one until it is swept, within a second).",
	[]string{"limit"}, nil)

// overridesGauge is sluice_overrides{limit}: one series per limit of the
// policy in force.
type overridesGauge struct{ set *overrides.Set }

func (overridesGauge) Describe(ch chan<- *prometheus.Desc) { ch <- overridesDesc }

func (g overridesGauge) Collect(ch chan<- prometheus.Metric) {
	for name, n := range g.set.Counts() {
		ch <- prometheus.MustNewConstMetric(overridesDesc, prometheus.GaugeValue, float64(n), name)
	}
}
