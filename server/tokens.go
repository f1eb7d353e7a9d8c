// Bearer tokens with names: who made a change (the audit log's actor).

package server

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// Token is a bearer token the service accepts, with the name the audit log
// gives whoever uses it ("" for a token without one).
type Token struct {
	Name  string
	Value string
}

// Actors of audit records that no named token made.
const (
	ActorUnnamed   = "token"     // a token without a name
	ActorAnonymous = "anonymous" // the service has no token for that endpoint
	ActorSystem    = "system"    // the service itself: a reload, an expiry
)

func (s *Server) hasAuthTokens() bool  { return s.cfg.AuthToken != "" || len(s.cfg.AuthTokens) > 0 }
func (s *Server) hasAdminTokens() bool { return s.cfg.AdminToken != "" || len(s.cfg.AdminTokens) > 0 }

// bearer is the token r carries ("Authorization: Bearer <token>", the
// scheme in any case), or "".
func bearer(r *http.Request) string {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// matchToken returns the token of one (a single token) or many that got
// equals, each compared in constant time (every one is compared).
func matchToken(got, one string, many []Token) (Token, bool) {
	var found Token
	ok := false
	g := []byte(got)
	if one != "" && subtle.ConstantTimeCompare(g, []byte(one)) == 1 {
		found, ok = Token{Value: one}, true
	}
	for _, t := range many {
		if subtle.ConstantTimeCompare(g, []byte(t.Value)) == 1 && !ok {
			found, ok = t, true
		}
	}
	return found, ok && got != ""
}

// authToken is the auth token (AuthToken, AuthTokens) r carries.
func (s *Server) authToken(r *http.Request) (Token, bool) {
	return matchToken(bearer(r), s.cfg.AuthToken, s.cfg.AuthTokens)
}

// adminToken is the admin token (AdminToken, AdminTokens) r carries.
func (s *Server) adminToken(r *http.Request) (Token, bool) {
	return matchToken(bearer(r), s.cfg.AdminToken, s.cfg.AdminTokens)
}

// actor names who made r's change: the name of its admin token, else of
// its auth token; ActorUnnamed for a token without a name, ActorAnonymous
// when r carries no token the service knows.
func (s *Server) actor(r *http.Request) string {
	t, ok := s.adminToken(r)
	if !ok {
		t, ok = s.authToken(r)
	}
	switch {
	case !ok:
		return ActorAnonymous
	case t.Name == "":
		return ActorUnnamed
	}
	return t.Name
}
