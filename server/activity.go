// Activity per limit over the last minutes, for the live page: GET /v1/stats.

package server

import (
	_ "embed"
	"net/http"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"sync"
	"sync/atomic"
	"time"
)

// ActivityStep is the resolution of the activity series, and
// ActivitySteps how many steps they keep (5 minutes).
const (
	ActivityStep  = 5 * time.Second
	ActivitySteps = 60
)

// activity counts, per limit, the decisions of each step of the last
// ActivitySteps: admitted, refused, shadow-refused. Memory: limits x
// steps, whatever the traffic.
type activity struct {
	mu sync.RWMutex
	by map[string]*series
}

type series struct {
	mu    sync.Mutex
	step  [ActivitySteps]int64    // the step index each slot holds
	count [ActivitySteps][3]int64 // admitted, refused, shadow refused
	total [3]atomic.Int64
}

func (a *activity) add(limit string, kind int, now time.Time) {
	a.mu.RLock()
	s := a.by[limit]
	a.mu.RUnlock()
	if s == nil {
		a.mu.Lock()
		if a.by == nil {
			a.by = map[string]*series{}
		}
		if s = a.by[limit]; s == nil {
			s = &series{}
			a.by[limit] = s
		}
		a.mu.Unlock()
	}
	s.total[kind].Add(1)
	step := now.UnixNano() / int64(ActivityStep)
	i := (step%ActivitySteps + ActivitySteps) % ActivitySteps // (a clock before 1970 included)
	s.mu.Lock()
	if s.step[i] != step {
		s.step[i], s.count[i] = step, [3]int64{}
	}
	s.count[i][kind]++
	s.mu.Unlock()
}

// Point is one step of a limit's activity: its start (Unix ms) and the
// decisions in it.
type Point struct {
	T             int64 `json:"t"`
	Admitted      int64 `json:"admitted"`
	Refused       int64 `json:"refused"`
	ShadowRefused int64 `json:"shadow_refused"`
}

// points is limit's last ActivitySteps steps before now, oldest first (the
// current, partial step last), and its totals since start.
func (a *activity) points(limit string, now time.Time) ([]Point, [3]int64) {
	a.mu.RLock()
	s := a.by[limit]
	a.mu.RUnlock()
	out := make([]Point, ActivitySteps)
	cur := now.UnixNano() / int64(ActivityStep)
	for j := range out {
		step := cur - ActivitySteps + 1 + int64(j)
		out[j].T = step * int64(ActivityStep) / int64(time.Millisecond)
	}
	var tot [3]int64
	if s == nil {
		return out, tot
	}
	s.mu.Lock()
	for j := range out {
		step := cur - ActivitySteps + 1 + int64(j)
		if i := (step%ActivitySteps + ActivitySteps) % ActivitySteps; s.step[i] == step {
			out[j].Admitted, out[j].Refused, out[j].ShadowRefused = s.count[i][0], s.count[i][1], s.count[i][2]
		}
	}
	s.mu.Unlock()
	for k := range tot {
		tot[k] = s.total[k].Load()
	}
	return out, tot
}

// StatsAnswer is the body of GET /v1/stats: what the live page shows.
type StatsAnswer struct {
	PolicyVersion string       `json:"policy_version"`
	StepMS        int64        `json:"step_ms"`
	Status        any          `json:"status,omitempty"` // Config.Status's answer: store, keys, reloads
	Limits        []LimitStats `json:"limits"`
}

// LimitStats is one limit of /v1/stats: its configuration and activity.
type LimitStats struct {
	Name            string  `json:"name"`
	Algorithm       string  `json:"algorithm"`
	Capacity        int64   `json:"capacity"`
	RefillPerSecond float64 `json:"refill_per_second"`
	Window          string  `json:"window,omitempty"` // a window's length, an in-flight cap's lease_ttl, a quota's period
	Shadow          bool    `json:"shadow"`
	Admitted        int64   `json:"admitted_total"`
	Refused         int64   `json:"refused_total"`
	ShadowRefused   int64   `json:"shadow_refused_total"`
	Series          []Point `json:"series"`
	// Unit is what the limit counts when it is not requests (policy unit:
	// "tokens", "usd", ...); a usd limit's capacity is in micro-dollars,
	// and SpentMicroUSD (with SpentUSD, in dollars) the spend this
	// instance has admitted on it since it started, corrected by its
	// settles.
	Unit          string `json:"unit,omitempty"`
	SpentMicroUSD *int64 `json:"spent_micro_usd,omitempty"`
	SpentUSD      string `json:"spent_usd,omitempty"`
	// AdaptiveRefill is, for an adaptive limit, the ceiling this instance
	// last decided one of its keys under or set by feedback.
	AdaptiveRefill *float64 `json:"adaptive_refill_per_second,omitempty"`
}

// stats serves GET /v1/stats.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	p := s.cfg.Limiter.Policy()
	ans := StatsAnswer{PolicyVersion: p.Version, StepMS: ActivityStep.Milliseconds(), Limits: []LimitStats{}}
	if s.cfg.Status != nil {
		ans.Status = s.cfg.Status()
	}
	statuses := map[string]limiter.LimitStatus{}
	for _, st := range s.cfg.Limiter.Statuses() {
		statuses[st.Name] = st
	}
	for _, l := range p.Limits {
		st := statuses[l.Name]
		var pts []Point
		var tot [3]int64
		if s.cfg.Keys != nil {
			pts, tot = s.cfg.Keys.activity.points(l.Name, now)
		}
		win := st.Period
		if win == "" && st.Window > 0 {
			win = st.Window.String()
		}
		ans.Limits = append(ans.Limits, LimitStats{Name: l.Name, Algorithm: st.Algorithm, Capacity: st.Capacity, RefillPerSecond: st.RefillPerSecond,
			Window: win, Shadow: st.Shadow, Admitted: tot[0], Refused: tot[1], ShadowRefused: tot[2], Series: pts, Unit: l.Unit})
		if l.Unit == policy.UnitUSD {
			n := s.spend.get(l.Name)
			last := &ans.Limits[len(ans.Limits)-1]
			last.SpentMicroUSD, last.SpentUSD = &n, policy.FormatMicroUSD(n)
		}
		if r, ok := s.cfg.Limiter.AdaptiveRefill(l.Name); ok {
			ans.Limits[len(ans.Limits)-1].AdaptiveRefill = &r
		}
	}
	writeJSON(w, http.StatusOK, ans)
}

//go:embed ui.html
var pageHTML []byte

// page serves the live page (GET / and /ui).
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	// Everything the page uses is its own: no other origin may be reached.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(pageHTML)
}
