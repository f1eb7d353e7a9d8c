// POST /v1/feedback: a call's outcome (overloaded or ok) told to the
// adaptive limits (policy adaptive:) that apply to its descriptors; a
// ceiling it lowers is an audit record (adaptive_ceiling).

package server

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
)

// FeedbackRequest is the body of POST /v1/feedback.
type FeedbackRequest struct {
	Descriptors map[string]string `json:"descriptors"`
	// Outcome is "overloaded" (the other side answered 429, 503 or 529
	// without a usable hint: each key's ceiling is lowered, once per the
	// limit's cooldown across instances) or "ok" (the ceilings are read).
	Outcome string `json:"outcome"`
	// Limits names the adaptive limits to tell; nil: every adaptive limit
	// that applies.
	Limits []string `json:"limits,omitempty"`
}

// FeedbackResponse is its answer: each adaptive limit told, with its
// key's ceiling after the feedback.
type FeedbackResponse struct {
	Limits []limiter.FeedbackStatus `json:"limits"`
}

// feedback serves POST /v1/feedback (auth as /v1/check).
func (s *Server) feedback(w http.ResponseWriter, r *http.Request) {
	var req FeedbackRequest
	if !s.decode(w, r, &req) {
		return
	}
	cr := CheckRequest{Descriptors: req.Descriptors}
	if err := cr.Validate(); err != nil {
		fail(w, answer.BadRequest, "%v", err)
		return
	}
	switch {
	case req.Outcome != "overloaded" && req.Outcome != "ok":
		fail(w, answer.BadRequest, `outcome %.40q must be "overloaded" or "ok"`, req.Outcome)
		return
	case len(req.Limits) > MaxDescriptors:
		fail(w, answer.BadRequest, "limits names %d limits, more than %d", len(req.Limits), MaxDescriptors)
		return
	case req.Limits != nil && len(req.Limits) == 0:
		fail(w, answer.BadRequest, "limits is empty: name the adaptive limits to tell, or leave it out to tell every one that applies")
		return
	}
	st, err := s.cfg.Limiter.Feedback(r.Context(), req.Descriptors, req.Outcome == "overloaded", req.Limits)
	switch {
	case errors.Is(err, limiter.ErrUnknownLimit):
		answer.Classify(err).Write(w)
		return
	case err != nil:
		answer.Classify(err).Write(w)
		return
	}
	for _, f := range st {
		if f.Lowered { // a change of what is enforced: the audit log's adaptive_ceiling
			s.auditRequest(r, "adaptive_ceiling", map[string]any{"limit": f.Name, "descriptors": s.shownDescriptors(req.Descriptors),
				"adaptive_refill_per_second": f.AdaptiveRefill, "refill_per_second": f.RefillPerSecond,
				"min_refill_per_second": f.MinRefill, "outcome": req.Outcome})
		}
	}
	writeJSON(w, http.StatusOK, FeedbackResponse{Limits: st})
}
