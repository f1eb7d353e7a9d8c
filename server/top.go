// The heaviest keys: GET /v1/top, from a KeyObserver the limiter feeds.

package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/topk"
)

// TopEpoch is the length of the epochs the heaviest keys are counted in,
// and TopSpan the longest span /v1/top answers for.
const (
	TopEpoch = 10 * time.Second
	TopSpan  = 15 * time.Minute
)

// Keys is what the server learns from every decision (a
// limiter.KeyObserver): per limit, the heaviest keys by refusals and by
// admitted cost over the last TopSpan (topk: k counters per epoch of
// TopEpoch; none when k is 0), and the decisions per step of the last
// five minutes (/v1/stats, the live page). Its memory is bounded by the
// number of limit names times k times the epochs, whatever the number of
// keys.
type Keys struct {
	k        int
	mu       sync.RWMutex
	by       map[string]*[2]*topk.Tracker // limit name -> [refused, admitted]
	activity activity
	// marks: per limit, the override that last decided a key
	// (ObserveOverride), for /v1/top; at most maxMarks keys a limit
	marks map[string]map[string]TopOverride
}

// maxMarks bounds the keys whose override Keys remembers, per limit (past
// it the marks start over: /v1/top marks the keys seen since).
const maxMarks = 4096

// TopOverride marks a key of /v1/top that an override decided: its match
// (as overrides.CanonicalMatch writes it) and whether it denies.
type TopOverride struct {
	Match  json.RawMessage `json:"match"`
	Denied bool            `json:"denied,omitempty"`
}

// TopKey is a key of /v1/top: its counts, and the override that last
// decided it, if any.
type TopKey struct {
	topk.Entry
	Override *TopOverride `json:"override,omitempty"`
}

// ObserveOverride implements limiter.OverrideObserver.
func (t *Keys) ObserveOverride(limit, key, match string, denied bool) {
	if t.k == 0 {
		return
	}
	mark := TopOverride{Match: json.RawMessage(match), Denied: denied}
	t.mu.RLock()
	old, ok := t.marks[limit][key]
	t.mu.RUnlock()
	if ok && old.Denied == denied && string(old.Match) == match {
		return
	}
	t.mu.Lock()
	if t.marks == nil {
		t.marks = map[string]map[string]TopOverride{}
	}
	m := t.marks[limit]
	if m == nil || len(m) >= maxMarks {
		m = map[string]TopOverride{}
		t.marks[limit] = m
	}
	m[key] = mark
	t.mu.Unlock()
}

// NewKeys returns a Keys of k counters per epoch per limit and measure (k
// 0: no heaviest keys, /v1/top off).
func NewKeys(k int) *Keys { return &Keys{k: k, by: map[string]*[2]*topk.Tracker{}} }

// ObserveKey implements limiter.KeyObserver.
func (t *Keys) ObserveKey(limit, key string, admitted int64, refused, shadow bool) {
	switch {
	case refused && shadow:
		t.activity.add(limit, 2, time.Now())
	case refused:
		t.activity.add(limit, 1, time.Now())
	case admitted > 0: // (not refused by this limit, but by another: not counted)
		t.activity.add(limit, 0, time.Now())
	}
	if t.k == 0 || !refused && admitted <= 0 {
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
	Limit string `json:"limit"`
	// Shadow: the limit is in shadow mode (its refusals are would-be ones).
	Shadow bool     `json:"shadow,omitempty"`
	By     string   `json:"by"`
	Span   string   `json:"span"`
	K      int      `json:"k"`
	Keys   []TopKey `json:"keys"`
}

// Query answers the n heaviest keys of limit by "refused" (count of
// refused requests) or "admitted" (admitted cost) over span.
func (t *Keys) Query(limit, by string, span time.Duration, n int) TopAnswer {
	ans := TopAnswer{Limit: limit, By: by, Span: span.String(), K: t.k, Keys: []TopKey{}}
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
	t.mu.RLock()
	marks := t.marks[limit]
	for _, e := range tr[i].Top(span, n) {
		k := TopKey{Entry: e}
		if m, ok := marks[e.Key]; ok {
			k.Override = &m
		}
		ans.Keys = append(ans.Keys, k)
	}
	t.mu.RUnlock()
	return ans
}

// top serves GET /v1/top?limit=NAME&by=refused|admitted&span=1m&n=10.
func (s *Server) top(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Keys == nil || s.cfg.Keys.k == 0 {
		fail(w, answer.TopOff, "the heaviest keys are not kept (sluice serve --top-keys 0)")
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
			fail(w, answer.BadRequest, "span %.40q must be a positive duration of at most %v (1m, 15m; rounded up to whole %v epochs)", v, TopSpan, TopEpoch)
			return
		}
	}
	if v := q.Get("n"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			fail(w, answer.BadRequest, "n %.40q must be a whole number of at least 1", v)
			return
		}
	}
	if limit == "" {
		fail(w, answer.BadRequest, "limit is required: /v1/top?limit=NAME (a limit of the policy)")
		return
	}
	if by != "refused" && by != "admitted" {
		fail(w, answer.BadRequest, "by %.40q must be refused or admitted", by)
		return
	}
	names := []string{}
	found := false
	for _, l := range s.cfg.Limiter.Policy().Limits {
		names = append(names, l.Name)
		found = found || l.Name == limit
	}
	if !found {
		fail(w, answer.UnknownLimit, "limit %.64q is not in the policy (limits: %v)", limit, names)
		return
	}
	ans := s.cfg.Keys.Query(limit, by, span, min(n, s.cfg.Keys.k))
	for _, st := range s.cfg.Limiter.Statuses() {
		if st.Name == limit {
			ans.Shadow = st.Shadow
		}
	}
	writeJSON(w, http.StatusOK, ans)
}
