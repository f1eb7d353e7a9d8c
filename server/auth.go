// Forward-auth: GET|POST /v1/auth, asked by a proxy (nginx auth_request,
// Caddy forward_auth, Traefik ForwardAuth) about the request it guards.

package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
)

// forwardedView reads what a proxy forwards of the request it guards: the
// method (X-Forwarded-Method, X-Original-Method), the URI
// (X-Forwarded-Uri, X-Original-URI, X-Original-Url; else the auth
// request's own), the X-Forwarded-For chain and the headers; the peer is
// the connection's.
func forwardedView(r *http.Request) (policy.RequestView, error) {
	v := policy.RequestView{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header}
	for _, h := range []string{"X-Forwarded-Method", "X-Original-Method"} {
		if m := r.Header.Get(h); m != "" {
			v.Method = strings.ToUpper(m)
			break
		}
	}
	for _, h := range []string{"X-Forwarded-Uri", "X-Original-Uri", "X-Original-Url"} {
		if u := r.Header.Get(h); u != "" {
			// As a request line: "//export" is a path, not a host. The
			// path as sent (RawPath), for policy.CleanPath to read:
			// EscapedPath would re-encode it from the decoded path when
			// it holds a byte sent unescaped, losing which "/" was %2F.
			pu, err := url.ParseRequestURI(u)
			if err != nil {
				return v, fmt.Errorf("%s %.80q is not a request URI", h, u)
			}
			if v.Path = pu.RawPath; v.Path == "" {
				v.Path = pu.EscapedPath()
			}
			break
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		v.Peer, _ = netip.ParseAddr(host)
	}
	v.ForwardedFor = r.Header.Values("X-Forwarded-For")
	return v, nil
}

// forwardAuth serves /v1/auth: the descriptors are read from the forwarded request
// by the policy's request_descriptors, decided as a check, and answered as
// a proxy copies them: 200 with the RateLimit fields, or 429 (?deny=403
// for nginx, whose auth_request passes only 2xx, 401 and 403) with
// Retry-After, the RateLimit fields and a small JSON body.
func (s *Server) forwardAuth(w http.ResponseWriter, r *http.Request) {
	deny := http.StatusTooManyRequests
	switch r.URL.Query().Get("deny") {
	case "", "429":
	case "403":
		deny = http.StatusForbidden
	case "401":
		deny = http.StatusUnauthorized
	default:
		fail(w, answer.BadRequest, "deny %.10q must be 429, 403 or 401", r.URL.Query().Get("deny"))
		return
	}
	p := s.cfg.Limiter.Policy()
	if len(p.Request) == 0 {
		fail(w, answer.NoRequestDescriptors, "the policy has no request_descriptors: /v1/auth cannot read descriptors from a request")
		return
	}
	view, err := forwardedView(r)
	if err != nil {
		fail(w, answer.BadRequest, "%v", err)
		return
	}
	desc, err := p.RequestDescriptors(view)
	if err != nil { // a path servers disagree on (policy.CleanPath)
		fail(w, answer.BadRequest, "%v", err)
		return
	}
	cr := CheckRequest{Descriptors: desc}
	if err := cr.Validate(); err != nil { // (the sizes /v1/check allows)
		fail(w, answer.BadRequest, "%v", err)
		return
	}
	lr := limiter.Request{Descriptors: desc}
	res, err := s.cfg.Limiter.Check(r.Context(), lr)
	s.traceDecision(r.Context(), lr, res, err)
	if err != nil {
		answer.Classify(err).Write(w)
		return
	}
	if name := res.DeniedBy(); name != "" {
		answer.Deny(name).Write(w)
		return
	}
	h := answer.OfResult(res)
	if !res.Allowed {
		answer.RefusedWith(w, deny, h, res.RetryAfter)
		return
	}
	h.Set(w.Header())
	w.WriteHeader(http.StatusOK)
}
