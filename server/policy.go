// GET /v1/policy: the policy in force, each limit with its terms (and its
// overrides' count).

package server

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// limitView is a limit as /v1/policy shows it.
type limitView struct {
	Name      string            `json:"name"`
	Key       string            `json:"key"`
	Algorithm string            `json:"algorithm"`
	When      map[string]string `json:"when,omitempty"`
	Capacity  int64             `json:"capacity"`
	Refill    float64           `json:"refill_per_second,omitempty"`
	Window    string            `json:"window,omitempty"`
	SlotTTL   string            `json:"lease_ttl,omitempty"`
	Period    string            `json:"period,omitempty"`
	Timezone  string            `json:"timezone,omitempty"`
	// OnStoreError is the limit's own on_store_error (absent: the
	// server's --on-store-error).
	OnStoreError string `json:"on_store_error,omitempty"`
	// Shadow: in shadow mode (the limit's shadow: true, or --shadow).
	Shadow bool `json:"shadow,omitempty"`
	// BlockFor is the limit's penalty box in force ("10m0s"; absent: none,
	// and none in shadow mode, which blocks no key).
	BlockFor string `json:"block_for,omitempty"`
	// Overrides is the number of overrides of the limit held (with
	// Config.Overrides; absent without).
	Overrides *int `json:"overrides,omitempty"`
	// Unit is what the limit counts when not requests (tokens, usd: a
	// usd limit's capacity and refill in micro-dollars).
	Unit string `json:"unit,omitempty"`
}

// viewOf is l as /v1/policy shows it.
func viewOf(l *policy.Limit, shadow bool) limitView {
	sh := l.Shape() // (each field its kind's, zero and omitted for others)
	v := limitView{Name: l.Name, Key: l.Key, Algorithm: l.Kind.String(), When: l.When,
		Capacity: sh.Capacity, Refill: sh.Rate, Window: durationField(sh.Window), SlotTTL: durationField(sh.SlotTTL),
		Period: sh.Period, Timezone: sh.Timezone, OnStoreError: l.OnStoreError, Shadow: shadow, Unit: l.Unit}
	if !shadow { // (a shadow limit blocks no key)
		v.BlockFor = durationField(l.BlockFor)
	}
	return v
}

func (s *Server) policy(w http.ResponseWriter, r *http.Request) {
	p := s.cfg.Limiter.Policy()
	shadow := map[string]bool{}
	for _, st := range s.cfg.Limiter.Statuses() {
		shadow[st.Name] = st.Shadow
	}
	out := struct {
		Version string      `json:"version"`
		Limits  []limitView `json:"limits"`
		Source  string      `json:"source"`
	}{Version: p.Version, Source: string(p.Source)}
	var counts map[string]int
	if s.cfg.Overrides != nil {
		counts = s.cfg.Overrides.Counts()
	}
	for _, l := range p.Limits {
		v := viewOf(l, shadow[l.Name])
		if counts != nil {
			n := counts[v.Name]
			v.Overrides = &n
		}
		out.Limits = append(out.Limits, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// durationField is d as /v1/policy shows it ("1m0s"), "" (omitted) for 0.
func durationField(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
