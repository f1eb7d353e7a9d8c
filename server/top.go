package server

// The heaviest keys: GET /v1/top, from a KeyObserver the limiter feeds.

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/topk"
)

// TopEpoch is the length of the epochs the heaviest keys are counted in,
// and TopSpan the longest span /v1/top answers for.
const (
	TopEpoch = 10 * time.Second
	TopSpan  = 15 * time.Minute
)

// Top keeps, per limit, the heaviest keys by refusals and by admitted
// cost over the last TopSpan (topk: k counters per epoch of TopEpoch). It
// is a limiter.KeyObserver; its memory is bounded by the number of limit
// names times k times the epochs, whatever the number of keys.
type Top struct {
	k  int
	mu sync.RWMutex
	by map[string]*[2]*topk.Tracker // limit name -> [refused, admitted]
}

// NewTop returns a Top of k counters per epoch per limit and measure (k
// >= 1).
func NewTop(k int) *Top { return &Top{k: k, by: map[string]*[2]*topk.Tracker{}} }

// ObserveKey implements limiter.KeyObserver.
func (t *Top) ObserveKey(limit, key string, admitted int64, refused bool) {
	if !refused && admitted <= 0 {
		return
	}
	t.mu.RLock()
	tr := t.by[limit]
	t.mu.RUnlock()
	if tr == nil {
		t.mu.Lock()
		if tr = t.by[limit]; tr == nil {
			tr = &[2]*topk.Tracker{topk.New(t.k, TopEpoch, TopSpan), topk.New(t.k, TopEpoch, TopSpan)}
			t.by[limit] = tr
		}
		t.mu.Unlock()
	}
	if refused {
		tr[0].Add(key, 1)
	}
	if admitted > 0 {
		tr[1].Add(key, admitted)
	}
}

// TopAnswer is the body of a /v1/top answer.
type TopAnswer struct {
	Limit string       `json:"limit"`
	By    string       `json:"by"`
	Span  string       `json:"span"`
	K     int          `json:"k"`
	Keys  []topk.Entry `json:"keys"`
}

// Query answers the n heaviest keys of limit by "refused" (count of
// refused requests) or "admitted" (admitted cost) over span.
func (t *Top) Query(limit, by string, span time.Duration, n int) TopAnswer {
	ans := TopAnswer{Limit: limit, By: by, Span: span.String(), K: t.k, Keys: []topk.Entry{}}
	t.mu.RLock()
	tr := t.by[limit]
	t.mu.RUnlock()
	if tr == nil {
		return ans
	}
	i := 0
	if by == "admitted" {
		i = 1
	}
	ans.Keys = tr[i].Top(span, n)
	return ans
}

// top serves GET /v1/top?limit=NAME&by=refused|admitted&span=1m&n=10.
func (s *Server) top(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Top == nil {
		fail(w, http.StatusNotFound, "top_off", "the heaviest keys are not kept (sluice serve --top-keys 0)")
		return
	}
	q := r.URL.Query()
	limit, by := q.Get("limit"), q.Get("by")
	if by == "" {
		by = "refused"
	}
	span, n := time.Minute, 10
	var err error
	if v := q.Get("span"); v != "" {
		if span, err = time.ParseDuration(v); err != nil || span <= 0 || span > TopSpan {
			fail(w, http.StatusBadRequest, "bad_request", "span %.40q must be a duration from 1s to %v (1m, 15m)", v, TopSpan)
			return
		}
	}
	if v := q.Get("n"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			fail(w, http.StatusBadRequest, "bad_request", "n %.40q must be a whole number of at least 1", v)
			return
		}
	}
	if by != "refused" && by != "admitted" {
		fail(w, http.StatusBadRequest, "bad_request", "by %.40q must be refused or admitted", by)
		return
	}
	names := []string{}
	found := false
	for _, l := range s.cfg.Limiter.Policy().Limits {
		names = append(names, l.Name)
		found = found || l.Name == limit
	}
	if !found {
		fail(w, http.StatusBadRequest, "unknown_limit", "limit %.64q is not in the policy (limits: %v)", limit, names)
		return
	}
	writeJSON(w, http.StatusOK, s.cfg.Top.Query(limit, by, span, min(n, s.cfg.Top.k)))
}
