// /v1/overrides: setting, deleting, listing and resolving the overrides of
// the policy's limits, who may (the admin token, loopback-only writes),
// the audit record of every change, and the errors they answer.

package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
)

// routeOverrides serves /v1/overrides (Config.Overrides set).
func (s *Server) routeOverrides() {
	s.mux.HandleFunc("PUT /v1/overrides", s.admin(true, s.putOverride))
	s.mux.HandleFunc("DELETE /v1/overrides", s.admin(true, s.deleteOverride))
	s.mux.HandleFunc("GET /v1/overrides", s.admin(false, s.listOverrides))
	s.mux.HandleFunc("GET /v1/overrides/resolve", s.admin(false, s.resolveOverride))
}

// admin guards a /v1/overrides handler: with AdminToken every method needs
// that token (AuthToken is not enough); else with AuthToken every method
// needs it; with neither, reads are open and writes are accepted only
// when LoopbackListener says the service listens on a loopback address
// (403 forbidden otherwise, naming the flags).
func (s *Server) admin(write bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case s.hasAdminTokens():
			if _, ok := s.adminToken(r); !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
				fail(w, answer.Unauthorized, "missing or wrong bearer token: %s takes the admin token (--admin-token-file)", r.URL.Path)
				return
			}
		case s.hasAuthTokens():
			if !s.authorized(r) {
				s.unauthorized(w)
				return
			}
		case write && !s.cfg.LoopbackListener:
			fail(w, answer.Forbidden, "%s /v1/overrides: this service has no token and listens beyond loopback; "+
				"give --admin-token-file (or --auth-token-file), or listen on a loopback address (--http 127.0.0.1:PORT)", r.Method)
			return
		}
		h(w, r)
	}
}

// putOverride serves PUT /v1/overrides: the body is one override
// (overrides.DecodeRequest), stored and put in force here at once, on
// the other instances at their next sync; 200 with the record stored.
func (s *Server) putOverride(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	o, err := overrides.DecodeRequest(body)
	if err != nil {
		overrideProblem(err, s.cfg.Overrides.Policy()).Write(w)
		return
	}
	s.ovMu.Lock()
	stored, err := overrides.PutShared(r.Context(), s.cfg.Overrides, s.cfg.OverrideStore, *o, time.Now())
	s.ovMu.Unlock()
	if err != nil {
		overrideProblem(err, s.cfg.Overrides.Policy()).Write(w)
		return
	}
	s.audit(r, "set", stored.Name, stored.Match, stored)
	writeJSON(w, http.StatusOK, stored)
}

// deleteOverride serves DELETE /v1/overrides {"name", "match"}: 200 with
// the override deleted (only its name and match when this instance had
// not synced it yet), 404 not_found when there is none (unknown_limit
// when its name is no limit of the policy either).
func (s *Server) deleteOverride(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	name, m, err := overrides.DecodeKey(body)
	if err != nil {
		overrideProblem(err, s.cfg.Overrides.Policy()).Write(w)
		return
	}
	set := s.cfg.Overrides
	s.ovMu.Lock()
	var old any = struct {
		Name  string            `json:"name"`
		Match map[string]string `json:"match"`
	}{name, m}
	if rule := set.Get(name, m); rule != nil {
		old = rule.Override()
	}
	err = overrides.DeleteShared(r.Context(), set, s.cfg.OverrideStore, name, m)
	s.ovMu.Unlock()
	if err != nil {
		overrideProblem(err, set.Policy()).Write(w)
		return
	}
	s.audit(r, "delete", name, m, old)
	writeJSON(w, http.StatusOK, old)
}

// listAnswer is the body of GET /v1/overrides.
type listAnswer struct {
	Limit     string             `json:"limit"`
	Filter    map[string]string  `json:"match,omitempty"`
	Overrides []overrides.Listed `json:"overrides"`
	Next      *string            `json:"next_cursor"` // null after the last page
}

// listOverrides serves GET /v1/overrides?limit=NAME[&match.KEY=VALUE...]
// [&cursor=C][&n=N]: a page of the limit's overrides (the API's and the
// policy file's), in canonical-match order, with this instance's
// matched_total and last_matched_at.
func (s *Server) listOverrides(w http.ResponseWriter, r *http.Request) {
	set := s.cfg.Overrides
	p := set.Policy()
	q, name, filter, ok := overrideQuery(w, r, p, "match.", "cursor", "n")
	if !ok {
		return
	}
	if len(filter) > 0 {
		// The filter names descriptors as an override's match does.
		if err := overrides.Validate(&overrides.Override{Name: name, Match: filter}, p); err != nil {
			overrideProblem(err, p).Write(w)
			return
		}
	}
	opt := overrides.ListOptions{Match: filter, Cursor: q.Get("cursor")}
	if v := q.Get("n"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > overrides.MaxPage {
			fail(w, answer.BadRequest, "n %.20q must be a whole number from 1 to %d", v, overrides.MaxPage)
			return
		}
		opt.N = n
	}
	page, next, err := set.List(name, opt)
	if err != nil {
		overrideProblem(err, p).Write(w)
		return
	}
	out := listAnswer{Limit: name, Overrides: page, Filter: filter}
	if out.Overrides == nil {
		out.Overrides = []overrides.Listed{}
	}
	if next != "" {
		out.Next = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// Sources of a resolve answer: what applies to the request.
const (
	resolvedOverride = "override"     // an override ("override" holds it)
	resolvedPolicy   = "policy_limit" // the policy limit's own parameters
	resolvedNone     = "none"         // the limit does not apply to the descriptors
)

// resolveAnswer is the body of GET /v1/overrides/resolve.
type resolveAnswer struct {
	Limit       string            `json:"limit"`
	Descriptors map[string]string `json:"descriptors"`
	// Applies: the limit applies to these descriptors (its key's
	// descriptors are all given and its when matches).
	Applies bool `json:"applies"`
	// Source is resolvedOverride, resolvedPolicy or resolvedNone.
	Source string `json:"source"`
	// Override is the override that applies (null: none does).
	Override *overrides.Listed `json:"override"`
	// Effective is the limit in force for the request (the policy's
	// limit with the override's parameters).
	Effective effectiveLimit `json:"effective"`
}

// effectiveLimit is a limit in force, as /v1/policy shows a limit, with
// what an override may add.
type effectiveLimit struct {
	limitView
	Unlimited bool   `json:"unlimited,omitempty"`
	Deny      bool   `json:"deny,omitempty"`
	BlockFor  string `json:"block_for,omitempty"`
}

// resolveOverride serves GET /v1/overrides/resolve?limit=NAME
// [&descriptors.KEY=VALUE...]: which override of the limit (or the
// policy limit itself) applies to a request with those descriptors, now.
// It counts no decision.
func (s *Server) resolveOverride(w http.ResponseWriter, r *http.Request) {
	set := s.cfg.Overrides
	p := set.Policy()
	_, name, desc, ok := overrideQuery(w, r, p, "descriptors.")
	if !ok {
		return
	}
	if desc == nil {
		desc = map[string]string{}
	}
	if err := (&CheckRequest{Descriptors: desc}).Validate(); err != nil { // (the bounds of a check's descriptors)
		fail(w, answer.BadRequest, "%v", err)
		return
	}
	lim := p.Limit(name)
	out := resolveAnswer{Limit: name, Descriptors: desc, Source: resolvedNone}
	_, out.Applies = lim.Match(desc)
	shadow := s.shadowed(name)
	out.Effective = effectiveLimit{limitView: viewOf(lim, shadow || lim.Shadow)}
	if out.Applies {
		out.Source = resolvedPolicy
		if rule := set.Resolve(name, desc, time.Now()); rule != nil {
			l := overrides.Listed{Override: rule.Override()}
			l.MatchedTotal, l.LastMatchedAt = rule.Matched()
			out.Source, out.Override = resolvedOverride, &l
			out.Effective = effectiveLimit{limitView: viewOf(rule.Limit(), shadow || rule.Shadow()),
				Unlimited: rule.Unlimited(), Deny: rule.Deny(), BlockFor: overrides.FormatDuration(rule.BlockFor())}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// shadowed reports whether the limiter runs limit name in shadow mode
// (the limit's shadow, or the server's --shadow).
func (s *Server) shadowed(name string) bool {
	for _, st := range s.cfg.Limiter.Statuses() {
		if st.Name == name {
			return st.Shadow
		}
	}
	return false
}

// overrideQuery reads the query of a GET /v1/overrides: limit (required,
// a limit of p), the parameters named by prefix (into a map, by the rest
// of their name) and the others allowed, each given once. It writes the
// error answer and returns false on failure.
func overrideQuery(w http.ResponseWriter, r *http.Request, p *policy.Policy, prefix string, allowed ...string) (url.Values, string, map[string]string, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		fail(w, answer.BadRequest, "malformed query: %v", err)
		return nil, "", nil, false
	}
	var m map[string]string
	for k, vs := range q {
		if len(vs) > 1 {
			fail(w, answer.BadRequest, "parameter %.130q is given %d times", k, len(vs))
			return nil, "", nil, false
		}
		switch rest, isMap := strings.CutPrefix(k, prefix); {
		case k == "limit":
		case isMap && rest != "":
			if m == nil {
				m = map[string]string{}
			}
			m[rest] = vs[0]
		case !isMap && containsStr(allowed, k):
		default:
			fail(w, answer.BadRequest, "unknown parameter %.130q (this endpoint takes limit, %s%s)", k, prefix+"KEY",
				strings.TrimSuffix(", "+strings.Join(allowed, ", "), ", "))
			return nil, "", nil, false
		}
	}
	name := q.Get("limit")
	if name == "" {
		fail(w, answer.BadRequest, "missing parameter limit (the policy limit, ?limit=NAME)")
		return nil, "", nil, false
	}
	if p.Limit(name) == nil {
		overrideProblem(&overrides.Error{Err: overrides.ErrUnknownLimit, Limit: name, Field: "limit",
			Msg: fmt.Sprintf("the policy has no limit %q", name)}, p).Write(w)
		return nil, "", nil, false
	}
	return q, name, m, true
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// overrideProblem is the answer to an error of the overrides package (its
// sentinels, as the package documents them) or of their store
// (store_error). unknown_limit is 404 here, not the table's 400: on
// /v1/overrides the limit is the resource asked for.
func overrideProblem(err error, p *policy.Policy) answer.Problem {
	var oe *overrides.Error
	limit := ""
	if errors.As(err, &oe) {
		limit = oe.Limit
	}
	var c answer.Code
	switch {
	case errors.Is(err, overrides.ErrUnknownLimit):
		c = answer.UnknownLimit
	case errors.Is(err, overrides.ErrNotFound):
		if limit != "" && p.Limit(limit) == nil {
			c, err = answer.UnknownLimit, fmt.Errorf("%w (and the policy has no limit %q)", err, limit)
		} else {
			c = answer.NotFound
		}
	case errors.Is(err, overrides.ErrKindMismatch):
		c = answer.KindMismatch
	case errors.Is(err, overrides.ErrUnknownDescriptor):
		c = answer.UnknownDescriptor
	case errors.Is(err, overrides.ErrTooMany):
		c = answer.TooManyOverrides
	case errors.Is(err, overrides.ErrPolicyOverride):
		c = answer.PolicyOverride
	case errors.Is(err, overrides.ErrBadRequest):
		c = answer.BadRequest
	default:
		return answer.New(answer.StoreError, "the overrides store failed: "+err.Error())
	}
	pr := answer.New(c, err.Error())
	if c == answer.UnknownLimit {
		pr.Status = http.StatusNotFound
	}
	pr.Limit = limit
	return pr
}

// readBody reads a request body within the size cap, writing the error
// answer (413 body_too_large, 400 bad_body) and returning false on
// failure.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			fail(w, answer.BodyTooLarge, "request body exceeds %d bytes", s.cfg.MaxBodyBytes)
		} else {
			fail(w, answer.BadBody, "reading the body: %v", err)
		}
		return nil, false
	}
	return body, true
}

// audit writes the record of one change through the API: msg "override
// changed", audit true, action (set or delete), the limit, the match, the
// override (as the API answered it), the actor (the name of the token the
// request came with, Server.actor) and the client's remote address; and
// the same change to the audit store (GET /v1/audit, action override_set
// or override_delete).
func (s *Server) audit(r *http.Request, action, limit string, match map[string]string, o any) {
	b, err := json.Marshal(o)
	if err != nil {
		b = []byte("null")
	}
	actor := s.actor(r)
	s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "override changed",
		slog.Bool("audit", true), slog.String("action", action), slog.String("limit", limit),
		slog.Any("match", match), slog.Any("override", rawJSON(b)), slog.String("actor", actor), slog.String("remote_addr", r.RemoteAddr))
	s.storeAudit(r.Context(), s.auditRecord(actor, "override_"+action, r.Method+" "+r.URL.Path, r.RemoteAddr,
		map[string]any{"limit": limit, "match": match, "override": rawJSON(b)}))
}

// rawJSON is a JSON value a log record writes as JSON (the JSON handler)
// or as its text (the text handler).
type rawJSON []byte

func (j rawJSON) MarshalJSON() ([]byte, error) { return j, nil }
func (j rawJSON) MarshalText() ([]byte, error) { return j, nil }
