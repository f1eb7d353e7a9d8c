// Alerts before the stop: a limit's alerts (policy alerts) crossed by a
// key fire one event per key, threshold and period across every instance
// (claimed in the store: store.Once), as a log record, a counter and a
// webhook (server/webhook.go); a status at its lowest alert below 1 is
// near_limit.

package server

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// AlertConfig configures alerts (Config.Alerts).
type AlertConfig struct {
	// Once claims each event across instances (redisstore.Store); nil:
	// this process alone decides (MemoryOnce). Every event is also
	// claimed in process first, so that a key above its threshold costs
	// the store one claim per period, not one per check.
	Once store.Once
	// WebhookURL, when set, receives each event: a POST of its JSON
	// (Alert), signed with WebhookSecret when set (X-Sluice-Signature:
	// sha256=<hex HMAC-SHA256 of the body>), retried on an error or an
	// answer other than 2xx after RetryFirst (default 1 s), then twice as
	// long each time, for RetryFor (default 10 minutes).
	WebhookURL    string
	WebhookSecret []byte
	RetryFirst    time.Duration
	RetryFor      time.Duration
	// Queue bounds the events waiting for their claim and the deliveries
	// under way (default 1024 each); beyond, an event is dropped and
	// counted (sluice_alerts_dropped_total): a decision never waits for
	// an alert.
	Queue int
	// Client sends the webhook (nil: a client with a 10 s timeout).
	Client HTTPDoer
}

// Alert is one alert event: the JSON a webhook receives.
type Alert struct {
	Limit       string    `json:"limit"`
	Key         string    `json:"key"` // as statuses show it (redacted descriptors hashed)
	Threshold   float64   `json:"threshold"`
	Used        int64     `json:"used"`
	LimitValue  int64     `json:"limit_value"`
	PeriodStart time.Time `json:"period_start"`
	At          time.Time `json:"at"`

	claim string        // the event's key in the claims
	ttl   time.Duration // how long its claim lasts (the period's rest)
}

// alerter detects crossings and fires their events.
type alerter struct {
	cfg    AlertConfig
	log    *slog.Logger
	local  *store.MemoryOnce
	queue  chan Alert
	start  sync.Once
	hook   *webhook
	fired  *prometheus.CounterVec
	drops  prometheus.Counter
	errors prometheus.Counter
}

func newAlerter(cfg AlertConfig, log *slog.Logger, reg prometheus.Registerer) (*alerter, error) {
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	a := &alerter{cfg: cfg, log: log, local: store.NewMemoryOnce(nil), queue: make(chan Alert, cfg.Queue),
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_alerts_total",
			Help: "Alert events fired (one per key, threshold and period across the instances sharing the store), by limit and threshold."}, []string{"limit", "threshold"}),
		drops: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_alerts_dropped_total",
			Help: "Alert events dropped because the alert queue (or the webhook's deliveries) was full."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_alert_claim_errors_total",
			Help: "Alert events whose claim in the shared store failed (fired by this instance anyway)."}),
	}
	if cfg.WebhookURL != "" {
		a.hook = newWebhook(cfg, log, a.drops)
	}
	if reg != nil {
		cs := []prometheus.Collector{a.fired, a.drops, a.errors}
		if a.hook != nil {
			cs = append(cs, a.hook.failures, a.hook.retries)
		}
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// observe marks the statuses of res near their limit and queues the
// alerts they cross; it never waits.
func (a *alerter) observe(p *policy.Policy, res *limiter.Result) {
	if a == nil || !hasAlerts(p) {
		return
	}
	var now time.Time
	for i := range res.Limits {
		st := &res.Limits[i]
		l := p.Limit(st.Name)
		if l == nil || len(l.Alerts) == 0 || st.Capacity <= 0 {
			continue
		}
		used := st.Capacity - st.TokensRemaining
		frac := float64(used) / float64(st.Capacity)
		if near := l.NearAlert(); near > 0 && frac >= near {
			st.NearLimit = true
		}
		for _, th := range l.Alerts {
			if frac < th {
				break
			}
			if now.IsZero() {
				now = time.Now()
			}
			start, ttl := periodOf(l, st, now)
			ev := Alert{Limit: st.Name, Key: st.Key, Threshold: th, Used: used, LimitValue: st.Capacity, PeriodStart: start, At: now, ttl: ttl}
			ev.claim = "alert:" + st.Name + ":" + strconv.FormatFloat(th, 'g', -1, 64) + ":" + strconv.FormatInt(start.UnixNano(), 10) + ":" + st.Key
			if ok, _ := a.local.Claim(context.Background(), ev.claim, ttl); !ok {
				continue // (fired, or being claimed, by this instance)
			}
			a.start.Do(func() {
				for range 4 {
					go a.work()
				}
			})
			select {
			case a.queue <- ev:
			default:
				a.drops.Inc()
			}
		}
	}
}

// hasAlerts reports whether some limit of p has alerts.
func hasAlerts(p *policy.Policy) bool {
	for _, l := range p.Limits {
		if len(l.Alerts) > 0 {
			return true
		}
	}
	return false
}

// periodOf is the period a status's use counts in at now, and how long
// of it is left: a quota's calendar period; a window's (aligned on the
// Unix epoch); a token bucket's time to refill its capacity (aligned
// alike).
func periodOf(l *policy.Limit, st *limiter.LimitStatus, now time.Time) (time.Time, time.Duration) {
	if st.Period != "" { // (a calendar quota: its period names it)
		s, e := l.Quota.Bounds(now.UnixNano())
		return time.Unix(0, s).UTC(), time.Duration(e - now.UnixNano())
	}
	span := st.Window
	if span <= 0 && st.RefillPerSecond > 0 {
		span = time.Duration(math.Min(float64(st.Capacity)/st.RefillPerSecond*1e9, float64(100*24*time.Hour)))
	}
	span = max(span, time.Second)
	start := now.Truncate(span)
	return start.UTC(), start.Add(span).Sub(now)
}

// work claims queued events in the shared store and fires those it wins.
func (a *alerter) work() {
	for ev := range a.queue {
		if a.cfg.Once != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ok, err := a.cfg.Once.Claim(ctx, ev.claim, ev.ttl)
			cancel()
			if err != nil {
				a.errors.Inc()
				a.log.Warn("sluice alert: claim failed; fired by this instance", slog.String("error", err.Error()))
			} else if !ok {
				continue // another instance fired it
			}
		}
		a.fire(ev)
	}
}

// fire logs, counts and sends one event.
func (a *alerter) fire(ev Alert) {
	th := strconv.FormatFloat(ev.Threshold, 'g', -1, 64)
	a.fired.WithLabelValues(ev.Limit, th).Inc()
	a.log.Info("sluice alert", slog.Bool("alert", true), slog.String("limit", ev.Limit), slog.String("key", ev.Key),
		slog.Float64("threshold", ev.Threshold), slog.Int64("used", ev.Used), slog.Int64("limit_value", ev.LimitValue),
		slog.Time("period_start", ev.PeriodStart))
	if a.hook != nil {
		a.hook.send(ev)
	}
}
