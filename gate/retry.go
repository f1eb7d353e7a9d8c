// Retries: the wait before a retry (server hints, jittered backoff) and the budget a caller may wait.

package gate

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice"
)

// BeforeRetry is what Do does before attempt number attempt (2 for the
// first retry) of a call whose last attempt failed with last: it counts
// the retry and sleeps the Retry policy's jittered backoff, or refuses at
// once (an error matching sluice.ErrWaitTooLong, joined with last) when
// the server's pause or the backoff cannot end within MaxWait or ctx's
// deadline. For callers that drive attempts themselves with Reserve (the
// HTTP transport with a token estimate); admit the retry with
// RetryAttempt(attempt) so that it is labelled as one.
func (g *Gate) BeforeRetry(ctx context.Context, attempt int, last error) error {
	return g.beforeRetry(ctx, attempt, last)
}

// beforeRetry sleeps the jittered backoff before retry number attempt-1, or
// refuses at once when the server's pause or the backoff cannot end within
// MaxWait or ctx's deadline.
func (g *Gate) beforeRetry(ctx context.Context, attempt int, last error) error {
	g.mu.Lock()
	now := g.now()
	delay := g.jitterLocked(attempt - 1)
	pause := g.pausedUntil.Sub(now)
	g.mu.Unlock()
	g.counters.retries.Add(1)
	need := max(delay, pause)
	budget := g.budget(ctx, now)
	if need > budget || (g.cfg.MaxWait > 0 && pause > g.cfg.MaxWait) {
		err := sluice.Errorf(sluice.ErrWaitTooLong, "retry %d of %q would wait %v, more than the %v allowed", attempt-1, g.name, need, budget)
		g.reject(err, ReasonWaitTooLong, 0, attempt, 0)
		return joinErrors(err, last)
	}
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return joinErrors(ctx.Err(), last)
	}
}

// jitterLocked returns the backoff before retry n (1-based).
func (g *Gate) jitterLocked(n int) time.Duration {
	lo, hi := g.cfg.Retry.BaseDelay, g.cfg.Retry.MaxDelay
	if lo == 0 && hi == 0 {
		return 0
	}
	top := hi
	if n < 62 && lo <= hi>>uint(n) {
		top = lo << uint(n)
	}
	span := int64(top - lo)
	if span <= 0 {
		return lo
	}
	var r int64
	if g.cfg.Rand != nil {
		r = g.cfg.Rand.Int64N(span + 1)
	} else {
		r = rand.Int64N(span + 1)
	}
	return lo + time.Duration(r)
}

// budget is how long a caller arriving at now may wait for admission.
func (g *Gate) budget(ctx context.Context, now time.Time) time.Duration {
	b := time.Duration(math.MaxInt64)
	if g.cfg.MaxWait > 0 {
		b = g.cfg.MaxWait
	}
	if dl, ok := ctx.Deadline(); ok {
		b = min(b, max(dl.Sub(now), 0))
	}
	return b
}
