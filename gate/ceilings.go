// Ceilings and pauses of one budget: Lower, LowerAll, PauseDimension, and
// finding a dimension's bucket.

package gate

import (
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// Lower lowers the tokens of a budget to at most remaining (a provider's
// own count, which may be lower than the gate's when another client shares
// the key); it never raises them. dimension is "requests" (or "") for
// Limit, else a Config.Dimensions name; it reports false for an unknown
// one.
func (g *Gate) Lower(dimension string, remaining int64) bool {
	return len(g.LowerAll([]Ceiling{{Dimension: dimension, Remaining: remaining}})) == 0
}

// Ceiling is a provider's count of one budget: at most Remaining tokens
// left. Dimension is as for Lower.
type Ceiling struct {
	Dimension string
	Remaining int64
}

// LowerAll is Lower for several budgets at once (those of one provider
// answer, say): each budget is lowered to at most its ceiling, never
// raised; a shared gate sends them to the store in one call, each one
// atomic ceiling. It returns the dimensions it does not know (skipped), in
// order.
func (g *Gate) LowerAll(cs []Ceiling) (unknown []string) {
	var shared []Ceiling
	for _, c := range cs {
		b := g.bucketOf(c.Dimension)
		switch {
		case b == nil:
			unknown = append(unknown, c.Dimension)
		case g.sh != nil:
			shared = append(shared, c)
		default:
			lowerLocal(b, c.Remaining)
		}
	}
	if len(shared) > 0 {
		g.lowerShared(shared)
	}
	return unknown
}

// lowerLocal lowers b's tokens to at most remaining.
func lowerLocal(b *bucket.Bucket, remaining int64) {
	for range 8 { // (another call may take tokens between the read and the take)
		excess := int64(b.Tokens()) - max(remaining, 0)
		if excess <= 0 {
			break
		}
		if d, _, _ := b.Take(excess); d.Allowed {
			break
		}
	}
}

// PauseDimension pauses one budget for d: "requests" (or "") pauses the
// whole gate (Pause); a Config.Dimensions name makes the calls that charge
// that dimension wait until d from now (or the later end of an earlier
// pause of it). It reports false for an unknown dimension; d <= 0 does
// nothing.
func (g *Gate) PauseDimension(dimension string, d time.Duration) bool {
	if dimension == "" || dimension == "requests" {
		g.Pause(d)
		return true
	}
	for i, x := range g.dims {
		if x.name != dimension {
			continue
		}
		if d > 0 && g.sh != nil {
			g.adjustShared(i+1, store.Adjustment{Pause: d})
		}
		if d > 0 {
			g.mu.Lock()
			until := g.now().Add(d).UnixNano()
			if until > x.pausedUntil.Load() {
				x.pausedUntil.Store(until)
				for _, w := range g.queue {
					signal(w)
				}
				g.logLocked(slog.LevelWarn, "rate limit: server hint pauses a dimension of the gate",
					slog.String("dimension", dimension), slog.Int64("retry_after_ms", ceilMS(d)))
			}
			g.mu.Unlock()
		}
		return true
	}
	return false
}

// bucketOf is the bucket of a budget ("requests" or "": Limit), nil for an
// unknown one.
func (g *Gate) bucketOf(dimension string) *bucket.Bucket {
	if dimension == "" || dimension == "requests" {
		return g.b
	}
	for _, d := range g.dims {
		if d.name == dimension {
			return d.b
		}
	}
	return nil
}

// budgetIndex is the index of a budget among the requests bucket (0) and
// the dimensions (1...); the caller has checked that it exists.
func (g *Gate) budgetIndex(dimension string) int {
	for i, d := range g.dims {
		if d.name == dimension {
			return i + 1
		}
	}
	return 0
}

// Pause makes every caller, queued or new, wait until d from now (or the
// later end of an earlier pause). Do calls it when a call returns a retry
// hint; the HTTP transport when a server answers 429 or 503 with one.
// d <= 0 does nothing.
func (g *Gate) Pause(d time.Duration) {
	if d <= 0 {
		return
	}
	if g.sh != nil {
		g.adjustShared(0, store.Adjustment{Pause: d})
	}
	g.mu.Lock()
	until := g.now().Add(d)
	if until.After(g.pausedUntil) {
		g.pausedUntil = until
		g.paused.Store(true)
		for _, w := range g.queue {
			signal(w)
		}
		g.logLocked(slog.LevelWarn, "rate limit: server hint pauses the gate",
			slog.Int64("retry_after_ms", ceilMS(d)), slog.Time("paused_until", until))
	}
	g.mu.Unlock()
}
