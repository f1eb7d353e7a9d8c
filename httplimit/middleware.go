// The HTTP middleware (Middleware) and the KeyFuncs that name a request's descriptors.

package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
)

// KeyFunc names a request: the descriptors (tenant, user, client_ip,
// route, ...) that select the limits that apply. An error refuses the
// request with 400.
type KeyFunc func(*http.Request) (map[string]string, error)

// ClientIP returns a KeyFunc setting descriptor "client_ip" to the client's
// address. The connection's peer is the client unless it is a trusted proxy
// (one of trusted); then X-Forwarded-For is read from the right, skipping
// trusted proxies, and the first other address is the client. With no
// trusted proxies, X-Forwarded-For is ignored (it is the client's to forge).
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	return func(r *http.Request) (map[string]string, error) {
		peer, err := peerOf(r)
		if err != nil {
			return nil, err
		}
		return map[string]string{"client_ip": policy.ClientIP(peer, r.Header.Values("X-Forwarded-For"), trusted).String()}, nil
	}
}

// peerOf is the address of r's connection.
func peerOf(r *http.Request) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("client address %q: %v", r.RemoteAddr, err)
	}
	return peer, nil
}

// FromPolicy returns a KeyFunc reading the descriptors of the policy in
// force of l (its request_descriptors section: client_ip past trusted
// proxies, headers, the path by prefix, the method) from the request
// itself, the way /v1/auth reads them from a request a proxy forwards.
func FromPolicy(l *limiter.Limiter) KeyFunc {
	return func(r *http.Request) (map[string]string, error) {
		peer, err := peerOf(r)
		if err != nil {
			return nil, err
		}
		path := r.URL.RawPath // (the path as sent, for policy.CleanPath)
		if path == "" {
			path = r.URL.EscapedPath()
		}
		return l.Policy().RequestDescriptors(policy.RequestView{Method: r.Method, Path: path, Peer: peer,
			ForwardedFor: r.Header.Values("X-Forwarded-For"), Header: r.Header})
	}
}

// Header returns a KeyFunc setting descriptor to the request header name's
// value; a missing header is an error when required, else the descriptor
// is left out (so limits that need it do not apply).
func Header(name, descriptor string, required bool) KeyFunc {
	return func(r *http.Request) (map[string]string, error) {
		v := r.Header.Get(name)
		if v == "" {
			if required {
				return nil, fmt.Errorf("header %s is required", name)
			}
			return map[string]string{}, nil
		}
		return map[string]string{descriptor: v}, nil
	}
}

// Route returns a KeyFunc setting descriptor "route" to the ServeMux
// pattern that matched (Go 1.22 patterns), else the URL path.
func Route() KeyFunc {
	return func(r *http.Request) (map[string]string, error) {
		if r.Pattern != "" {
			return map[string]string{"route": r.Pattern}, nil
		}
		return map[string]string{"route": r.URL.Path}, nil
	}
}

// Combine merges the descriptors of several KeyFuncs (later ones win).
func Combine(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (map[string]string, error) {
		out := map[string]string{}
		for _, f := range fs {
			d, err := f(r)
			if err != nil {
				return nil, err
			}
			for k, v := range d {
				out[k] = v
			}
		}
		return out, nil
	}
}

// MiddlewareOption configures NewMiddleware.
type MiddlewareOption func(*Middleware)

// WithRequestCost sets each request's cost (default: the policy's).
func WithRequestCost(f func(*http.Request) int64) MiddlewareOption {
	return func(m *Middleware) { m.cost = f }
}

// FailOpen lets requests through when the limiter's store fails (the
// default is to fail closed: 503).
func FailOpen() MiddlewareOption { return func(m *Middleware) { m.failOpen = true } }

// WithLogger logs store failures.
func WithLogger(l *slog.Logger) MiddlewareOption { return func(m *Middleware) { m.log = l } }

// MaxDescriptorBytes bounds each descriptor name and value the middleware
// passes to the limiter (keys are stored, so their size bounds memory); a
// longer one is refused with 400.
const MaxDescriptorBytes = 1024

// Middleware limits the requests of an http.Handler with a limiter.
type Middleware struct {
	l        *limiter.Limiter
	key      KeyFunc
	cost     func(*http.Request) int64
	failOpen bool
	log      *slog.Logger
}

// NewMiddleware returns a middleware checking each request against l with
// the descriptors key gives.
func NewMiddleware(l *limiter.Limiter, key KeyFunc, opts ...MiddlewareOption) *Middleware {
	m := &Middleware{l: l, key: key, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Handle wraps next: a refused request gets 429 with Retry-After, the
// RateLimit/RateLimit-Policy fields and a JSON body {"error", "code":
// "rate_limited", "retry_after_ms"}; an admitted one gets the fields and
// reaches next, and the in-flight slots it took (max_in_flight limits) are
// released when next returns. Errors answer JSON {"error", "code"} as the
// sluice service does: a request whose cost exceeds a limit's capacity
// 422 cost_exceeds_capacity (it can never be admitted; "limit" names it), a
// KeyFunc error 400 bad_request; when the store fails, 503 store_error (or
// store_full), or next is called anyway with FailOpen.
func (m *Middleware) Handle(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		desc, err := m.key(r)
		if err == nil {
			for k, v := range desc {
				if len(k) > MaxDescriptorBytes || len(v) > MaxDescriptorBytes {
					err = fmt.Errorf("descriptor %.40q is longer than %d bytes", k, MaxDescriptorBytes)
				}
			}
		}
		if err != nil {
			answer.Errorf(answer.BadRequest, "rate limit: %v", err).Write(w)
			return
		}
		req := limiter.Request{Descriptors: desc}
		if m.cost != nil {
			req.Cost = m.cost(r)
		}
		res, err := m.l.Check(r.Context(), req)
		if err != nil {
			p := answer.Classify(err)
			switch {
			case p.Status != http.StatusServiceUnavailable:
				p.Write(w) // the request's own fault (its cost)
			case m.failOpen:
				m.log.Error("rate limit store failed; letting the request through", "error", err)
				next.ServeHTTP(w, r)
			default:
				m.log.Error("rate limit store failed; refusing", "error", err)
				p.Write(w)
			}
			return
		}
		h := answer.OfResult(res)
		if !res.Allowed {
			answer.Refused(w, h, res.RetryAfter)
			return
		}
		h.Set(w.Header())
		if res.Slots.ID != "" {
			defer m.l.Release(context.WithoutCancel(r.Context()), res.Slots)
		}
		next.ServeHTTP(w, r)
	})
}

// RateLimitHeaders returns the IETF RateLimit-Policy and RateLimit field
// values (draft-ietf-httpapi-ratelimit-headers, structured-field syntax)
// for the most constraining limit of a decision: the refused one with the
// longest wait, else the one with the least remaining relative to its
// capacity. The policy's window w is the time to refill the capacity (a
// window limit's length); r is the whole tokens left, t the seconds until
// the limit admits again (refused) or is full again (admitted), rounded
// up; an in-flight cap is described with q its max_in_flight, w its
// lease_ttl and r its free slots. The sluice service, this middleware and
// the Envoy RateLimitService render the same fields.
func RateLimitHeaders(res limiter.Result) (policyField, rateLimit string, ok bool) {
	var buf [8]answer.Limit
	ls := answer.FromResult(buf[:0], res)
	i := answer.Tightest(ls)
	if i < 0 {
		return "", "", false
	}
	policyField, rateLimit = answer.Fields(ls[i])
	return policyField, rateLimit, true
}
