// Pauses: a server's retry hint seen by one caller, applied to every caller.

package limiter

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// MaxPause is the longest pause Pause accepts.
const MaxPause = 24 * time.Hour

// Pause applies a server's retry hint (a provider's Retry-After) to the
// token-bucket limits that apply to descriptors — those named in limits,
// or, when limits is empty, every one — in the store, so that it holds for
// every caller of every instance sharing it: each such bucket refuses (or
// makes new bookings wait) until d from now, and restarts empty then,
// refilling at its rate, so that callers do not come back in a wave
// (store.Adjustment.Pause). Bookings made before the pause keep their
// turns (their tokens were taken already). A shorter pause than one in
// force changes nothing. It returns when the pause in force ends, on this
// host's clock (the longest of the buckets', read back from the store).
//
// Errors, with nothing paused: d <= 0 or above MaxPause
// (sluice.ErrInvalidLimit); a name
// that is not a limit applying to descriptors (*UnknownLimitError); a
// named limit that is not a token bucket, or none applying
// (sluice.ErrInvalidLimit); the store failing.
func (l *Limiter) Pause(ctx context.Context, descriptors map[string]string, d time.Duration, limits []string) (time.Time, error) {
	if d <= 0 || d > MaxPause {
		return time.Time{}, sluice.Errorf(sluice.ErrInvalidLimit, "pause %v must be positive and at most %v", d, MaxPause)
	}
	c := l.compiled.Load()
	// The keys of the limits applying: a peek of cost 1, which every
	// limit's capacity covers.
	sc := newScratch()
	items, err := c.plan(&Request{Descriptors: descriptors, Cost: 1, Peek: true}, sc, &Result{}, false)
	if err != nil {
		return time.Time{}, err
	}
	var adj []store.Adjustment
	var names, shown, applicable []string
	for k, it := range items {
		i := sc.which[k]
		lim := c.p.Limits[i]
		applicable = append(applicable, lim.Name)
		named := slices.Contains(limits, lim.Name)
		if len(limits) > 0 && !named {
			continue
		}
		if !lim.Kind.Pausable() {
			if named {
				return time.Time{}, sluice.Errorf(sluice.ErrInvalidLimit, "limit %q is a %s limit: only token buckets pause", lim.Name, lim.Kind)
			}
			continue
		}
		adj = append(adj, store.Adjustment{Key: it.Key, Spec: it.Spec, Base: it.Base, Pause: d})
		names, shown = append(names, lim.Name), append(shown, it.Key[sc.user[k]:])
	}
	for _, n := range limits {
		if !slices.Contains(applicable, n) {
			return time.Time{}, &UnknownLimitError{Name: n, Applicable: applicable}
		}
	}
	if len(adj) == 0 {
		return time.Time{}, sluice.Errorf(sluice.ErrInvalidLimit, "no token-bucket limit applies to these descriptors: nothing to pause")
	}
	start := time.Now()
	if err := l.st.Adjust(ctx, adj); err != nil {
		l.m.errors.Inc()
		return time.Time{}, fmt.Errorf("limiter: %w", err)
	}
	until := start.Add(d)
	// A longer pause in force keeps its end: read it back (each bucket is
	// empty until its ResetAfter less its time to refill).
	peek := make([]store.Item, len(adj))
	for j, a := range adj {
		peek[j] = store.Item{Key: a.Key, Spec: a.Spec, Base: a.Base}
	}
	if _, err := l.st.Take(ctx, peek); err == nil {
		for j := range peek {
			sh := c.p.Limits[c.index(names[j])].Shape()
			fill := time.Duration(float64(sh.Capacity) / sh.Rate * float64(time.Second))
			if end := time.Now().Add(peek[j].Decision.ResetAfter - fill); end.After(until) {
				until = end
			}
		}
	}
	for j, n := range names {
		l.m.pauses.WithLabelValues(n).Inc()
		i := c.index(n)
		lim, st := c.p.Limits[i], c.status[i]
		key := shown[j]
		if len(c.p.Redact) > 0 {
			key, _ = c.p.DisplayKey(lim, descriptors)
		}
		if l.log != nil { // (not within the refusal records' budget: pauses are few, and matter when refusals are many)
			l.log.LogAttrs(ctx, slog.LevelInfo, "rate limit: paused by a retry hint", slog.String("limiter", n), slog.String("result", ResultPaused),
				slog.Int64("bucket_capacity", st.Capacity), slog.Float64("refill_per_second", st.RefillPerSecond),
				slog.String("key", key), slog.Int64("retry_after_ms", CeilMS(d)))
		}
	}
	return until, nil
}

// observeWait counts a booked wait: per limit whose item waited, and its
// length.
func (l *Limiter) observeWait(c *compiled, items []store.Item, which []int, wait time.Duration) {
	l.m.waitSecs.Observe(wait.Seconds())
	for i := range items {
		if items[i].Wait > 0 {
			l.m.waits.WithLabelValues(c.p.Limits[which[i]].Name).Inc()
		}
	}
}
