// Keeping /v1/overrides' Set in step with their store (the sync loop), and
// the sluice_overrides gauge.

package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	problems, err := overrides.Sync(ctx, set, st)
	s.ovMu.Unlock()
	for _, p := range problems {
		s.cfg.Logger.Warn("override held inactive: the policy in force refuses it", "error", p.Error())
	}
	set.Sweep(time.Now())
	return err
}

// SyncOverrides calls SyncOverridesNow every period until ctx is done
// (the first call after one period), or until the store is closed,
// logging the store's errors (at most a few a second). An override set through another instance applies here
// within a period (and the store's answer time); one that expires stops
// applying at its expiry exactly, whether or not it has been swept.
func (s *Server) SyncOverrides(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.SyncOverridesNow(ctx)
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
