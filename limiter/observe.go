// Metrics and logs of decisions, and the labels they use.

package limiter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/store"
)

// The values of sluice_decisions_total's result label and of the "result"
// field of the limiter's log records (the Envoy service counts with them
// too).
const (
	ResultAdmitted       = "admitted"
	ResultRejected       = "rejected"
	ResultShadowRejected = "shadow_rejected" // a shadow limit's would-be refusal
	ResultPaused         = "paused"          // a pause's log record (Pause)
)

// The values of sluice_decisions_total's attempt label: an original
// request, or one marked Request.Retry.
const (
	AttemptOriginal = "original"
	AttemptRetry    = "retry"
)

// decisionResults and attempts are the labels of compiled.counters'
// indices: [result][attempt].
var (
	decisionResults = [...]string{byAdmitted: ResultAdmitted, byRejected: ResultRejected, byShadowRejected: ResultShadowRejected}
	attempts        = [...]string{byOriginal: AttemptOriginal, byRetry: AttemptRetry}
)

const (
	byAdmitted = iota
	byRejected
	byShadowRejected
)

const (
	byOriginal = iota
	byRetry
)

// shownKeys rewrites the key a store's FullError names into what statuses
// show: the caller's part of the key (no limit prefix, state tag or hash
// tag), its redacted descriptors as hashes, after the limit's name.
func (l *Limiter) shownKeys(c *compiled, err error, items []store.Item, which, user []int, desc map[string]string) error {
	var fe *store.FullError
	if !errors.As(err, &fe) {
		return err
	}
	for i := range items {
		if items[i].Key != fe.Key {
			continue
		}
		lim := c.p.Limits[which[i]]
		shown := items[i].Key[user[i]:]
		if len(c.p.Redact) > 0 {
			shown, _ = c.p.DisplayKey(lim, desc)
		}
		e := *fe
		e.Key = lim.Name + " " + shown
		return &e
	}
	return err
}

func (l *Limiter) observe(ctx context.Context, c *compiled, which []int, res *Result, req *Request, start time.Time, timed bool) {
	if timed {
		l.m.latency.Observe(time.Since(start).Seconds())
	}
	if req.Peek {
		return // a peek decides nothing: not counted, not logged as refused
	}
	attempt := byOriginal
	if req.Retry {
		attempt = byRetry
	}
	ctrs := c.counters
	if res.class > 0 { // a priority class's own counters
		ctrs = c.classCtr[res.class-1]
	}
	for j := range res.Limits {
		st := &res.Limits[j]
		result := byAdmitted
		if st.ShadowRefused {
			result = byShadowRejected
		} else if !st.Allowed {
			result = byRejected
		}
		ctrs[which[j]][result][attempt].Inc()
		if st.Override != nil {
			ov := result
			if st.Denied && !st.ShadowRefused {
				ov = byDenied
			}
			c.ovCount[which[j]][ov].Inc()
		}
		if res.Allowed && st.Allowed && float64(st.TokensRemaining) < NearLimitShare*float64(st.Capacity) {
			c.near[which[j]].Inc()
		}
		if !st.Allowed && l.log != nil {
			l.logRefusal(ctx, c, which[j], st, req)
		}
		if l.keys != nil {
			key := st.Key
			if len(c.p.Redact) > 0 {
				key, _ = c.p.DisplayKey(c.p.Limits[which[j]], req.Descriptors)
			}
			admitted := int64(0)
			if res.Allowed && !st.ShadowRefused { // (a shadow limit that would refuse took nothing)
				admitted = st.TokenCost
			}
			l.keys.ObserveKey(st.Name, key, admitted, !st.Allowed, st.ShadowRefused)
			if st.Override != nil && l.ovKeys != nil {
				l.ovKeys.ObserveOverride(st.Name, key, st.Override.CanonicalMatch(), st.Denied)
			}
		}
	}
}

// logRefusal logs a limit's refusal with the fields of its kind: a token
// bucket's are the behaviour contract's (bucket_capacity,
// refill_per_second, token_cost, tokens_remaining), a window's its limit
// and length, an in-flight cap's max_in_flight and in_flight, a quota's
// quota_limit, period and timezone. Durations are
// milliseconds; the key shows redacted descriptors as a hash. A check
// traced (a span in ctx) adds trace_id and span_id.
func (l *Limiter) logRefusal(ctx context.Context, c *compiled, i int, st *LimitStatus, req *Request) {
	lim := c.p.Limits[i]
	key := st.Key
	if len(c.p.Redact) > 0 {
		key, _ = c.p.DisplayKey(lim, req.Descriptors)
	}
	attrs := make([]slog.Attr, 0, 10)
	result, msg := ResultRejected, "rate limit: request refused"
	if st.Denied && !st.ShadowRefused {
		msg = "rate limit: request denied by an override"
	}
	if st.ShadowRefused {
		result, msg = ResultShadowRejected, "rate limit: request would be refused (shadow)"
	}
	attrs = append(attrs, slog.String("limiter", st.Name), slog.String("result", result), slog.String("algorithm", st.Algorithm))
	attrs = lim.LogAttrs(attrs, st.TokenCost, st.TokensRemaining)
	attrs = append(attrs, slog.String("key", key), slog.Bool("retry", req.Retry), slog.Int64("retry_after_ms", CeilMS(st.RetryAfter)))
	if st.Override != nil {
		attrs = append(attrs, slog.Group("override", slog.Any("match", st.Override.Match())))
		if st.Denied {
			attrs = append(attrs, slog.Bool("denied", true))
		}
	}
	l.logf(slog.LevelInfo, msg, traceIDs(ctx, attrs)...)
}

// logf writes a record within the log budget.
func (l *Limiter) logf(level slog.Level, msg string, attrs ...slog.Attr) {
	l.logs.Log(l.log, level, msg, attrs...)
}
