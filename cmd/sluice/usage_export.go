// sluice serve --usage-export: per (limit, key) usage each interval, as
// JSON lines to a file (rotated by size) or POSTed in batches to a URL.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
)

// usageFlags are serve's usage export flags.
type usageFlags struct {
	UsageExport   string        `name:"usage-export" help:"Export usage per (limit, key) every --usage-interval: a FILE (JSON lines, rotated at --usage-file-max bytes) or an http(s)://URL (POSTed in batches of JSON lines, retried, at most --usage-buffer rows held; drops counted in sluice_usage_dropped_total). Off unless given."`
	UsageInterval time.Duration `name:"usage-interval" default:"60s" help:"How often usage is exported (at least 1s)."`
	UsageKeys     int           `name:"usage-keys" default:"100000" help:"Most keys per interval counted apart (at least 1); the rest of each limit's keys are summed into one row with key \"other\"."`
	UsageFileMax  int64         `name:"usage-file-max" default:"104857600" help:"Size in bytes past which the --usage-export file is rotated (FILE.1, FILE.2, FILE.3 kept; at least 4096)."`
	UsageBuffer   int           `name:"usage-buffer" default:"100000" help:"Most rows held for a --usage-export URL that does not answer; beyond, new rows are dropped and counted (at least 1)."`
}

func (f usageFlags) validateUsage() error {
	if f.UsageExport == "" {
		return nil
	}
	switch {
	case f.UsageInterval < time.Second:
		return fmt.Errorf("--usage-interval %v: must be at least 1s", f.UsageInterval)
	case f.UsageKeys < 1:
		return fmt.Errorf("--usage-keys %d: must be at least 1", f.UsageKeys)
	case f.UsageFileMax < 4096:
		return fmt.Errorf("--usage-file-max %d: must be at least 4096", f.UsageFileMax)
	case f.UsageBuffer < 1:
		return fmt.Errorf("--usage-buffer %d: must be at least 1", f.UsageBuffer)
	}
	if strings.HasPrefix(f.UsageExport, "http://") || strings.HasPrefix(f.UsageExport, "https://") {
		if u, err := url.Parse(f.UsageExport); err != nil || u.Host == "" {
			return fmt.Errorf("--usage-export %q: not a URL", f.UsageExport)
		}
	}
	return nil
}

// UsageRow is one exported row: what one key of one limit consumed and was
// refused in [Start, End). SpendMicros is AdmittedCost for a limit whose
// unit is usd (micro-dollars), absent otherwise.
type UsageRow struct {
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	Instance      string    `json:"instance"`
	Limit         string    `json:"limit"`
	Key           string    `json:"key"`
	Admitted      int64     `json:"admitted"`
	AdmittedCost  int64     `json:"admitted_cost"`
	Refused       int64     `json:"refused"`
	ShadowRefused int64     `json:"shadow_refused,omitempty"`
	SpendMicros   *int64    `json:"spend_micros,omitempty"`
}

// usageCount is a key's counts in the interval.
type usageCount struct {
	admitted, cost, refused, shadow int64
}

// usage counts decisions per (limit, key) (a limiter.KeyObserver) and
// exports them each interval.
type usage struct {
	mu       sync.Mutex
	counts   map[string]map[string]*usageCount // limit → key → counts
	keys     int                               // distinct keys counted apart this interval
	maxKeys  int
	start    time.Time
	instance string
	policy   func() *policy.Policy
	sink     usageSink
	log      *slog.Logger
	stop     chan struct{}
	done     chan struct{}
	rows     prometheus.Counter
	once     sync.Once
}

// usageSink writes an interval's rows.
type usageSink interface {
	write(rows []UsageRow) error
	close(ctx context.Context) error
}

// ObserveKey implements limiter.KeyObserver: one decision of one limit's
// key (admitted the cost taken, refused a refusal, shadow a shadow limit's
// would-be refusal), counted as sluice_decisions_total counts it.
func (u *usage) ObserveKey(limit, key string, admitted int64, refused, shadow bool) {
	u.mu.Lock()
	byKey := u.counts[limit]
	if byKey == nil {
		byKey = map[string]*usageCount{}
		u.counts[limit] = byKey
	}
	c := byKey[key]
	if c == nil {
		if u.keys >= u.maxKeys {
			key = "other"
			if c = byKey[key]; c == nil {
				c = &usageCount{}
				byKey[key] = c
			}
		} else {
			u.keys++
			c = &usageCount{}
			byKey[key] = c
		}
	}
	switch {
	case shadow:
		c.shadow++
	case refused:
		c.refused++
	default:
		c.admitted++
		c.cost += admitted
	}
	u.mu.Unlock()
}

// flush exports what was counted since the last flush, as of now.
func (u *usage) flush() {
	u.mu.Lock()
	counts, start := u.counts, u.start
	u.counts, u.keys = map[string]map[string]*usageCount{}, 0
	now := time.Now().UTC()
	u.start = now
	u.mu.Unlock()
	var p *policy.Policy
	if u.policy != nil {
		p = u.policy()
	}
	var rows []UsageRow
	for limit, byKey := range counts {
		usd := false
		if p != nil {
			if l := p.Limit(limit); l != nil {
				usd = l.Unit == policy.UnitUSD
			}
		}
		for key, c := range byKey {
			r := UsageRow{Start: start, End: now, Instance: u.instance, Limit: limit, Key: key,
				Admitted: c.admitted, AdmittedCost: c.cost, Refused: c.refused, ShadowRefused: c.shadow}
			if usd {
				v := c.cost
				r.SpendMicros = &v
			}
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	if err := u.sink.write(rows); err != nil {
		u.log.Error("usage export failed", "error", err.Error(), "rows", len(rows))
		return
	}
	u.rows.Add(float64(len(rows)))
}

// run flushes every interval until stopped.
func (u *usage) run(every time.Duration) {
	defer close(u.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			u.flush()
		case <-u.stop:
			return
		}
	}
}

// shutdown stops the ticker, flushes the interval in progress (a SIGTERM
// loses nothing counted) and closes the sink within ctx.
func (u *usage) shutdown(ctx context.Context) {
	u.once.Do(func() {
		close(u.stop)
		<-u.done
		u.flush()
		if err := u.sink.close(ctx); err != nil {
			u.log.Error("usage export: not all rows sent at shutdown", "error", err.Error())
		}
	})
}

// startUsage starts --usage-export (nil without it).
func (s *service) startUsage(reg prometheus.Registerer) (*usage, error) {
	c := s.c
	if c.UsageExport == "" {
		return nil, nil
	}
	rows := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_usage_rows_total",
		Help: "Usage rows exported (--usage-export): written to the file, or queued for the URL."})
	var sink usageSink
	if strings.HasPrefix(c.UsageExport, "http://") || strings.HasPrefix(c.UsageExport, "https://") {
		ps := newPostSink(c.UsageExport, c.UsageBuffer, s.log)
		if reg != nil {
			reg.MustRegister(ps.dropped, ps.failed)
		}
		sink = ps
	} else {
		fs, err := newFileSink(c.UsageExport, c.UsageFileMax)
		if err != nil {
			return nil, fmt.Errorf("--usage-export: %w", err)
		}
		sink = fs
	}
	if reg != nil {
		reg.MustRegister(rows)
	}
	u := &usage{counts: map[string]map[string]*usageCount{}, maxKeys: c.UsageKeys, start: time.Now().UTC(),
		instance: instanceName(c.HTTP), sink: sink, log: s.log, stop: make(chan struct{}), done: make(chan struct{}), rows: rows}
	if s.p != nil {
		u.policy = func() *policy.Policy {
			if s.lim == nil {
				return nil
			}
			return s.lim.Policy()
		}
	}
	go u.run(c.UsageInterval)
	return u, nil
}

// keyObservers is the limiter's KeyObserver: the heaviest keys (/v1/top)
// and, with --usage-export, the usage.
func keyObservers(top limiter.KeyObserver, u *usage) limiter.KeyObserver {
	if u == nil {
		return top
	}
	return &bothObservers{top: top, u: u}
}

// bothObservers tells a decision to /v1/top's keys and the usage export;
// it keeps top's OverrideObserver.
type bothObservers struct {
	top limiter.KeyObserver
	u   *usage
}

func (b *bothObservers) ObserveKey(limit, key string, admitted int64, refused, shadow bool) {
	b.top.ObserveKey(limit, key, admitted, refused, shadow)
	b.u.ObserveKey(limit, key, admitted, refused, shadow)
}

func (b *bothObservers) ObserveOverride(limit, key, match string, denied bool) {
	if o, ok := b.top.(limiter.OverrideObserver); ok {
		o.ObserveOverride(limit, key, match, denied)
	}
}

// rowsJSON is rows as JSON lines.
func rowsJSON(rows []UsageRow) []byte {
	var b []byte
	for _, r := range rows {
		j, _ := json.Marshal(r)
		b = append(append(b, j...), '\n')
	}
	return b
}

// stopUsage exports the interval in progress and stops (within 10 s).
func (s *service) stopUsage() {
	if s.usage == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.usage.shutdown(ctx)
}
