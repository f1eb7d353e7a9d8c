// Descriptors read from an HTTP request (request_descriptors): for
// forward-auth (/v1/auth), where a proxy forwards the request it guards.

package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RequestDescriptor says how one descriptor is read from a request:
//
//	request_descriptors:
//	  client_ip: {from: client_ip, trusted_proxies: [127.0.0.0/8]}
//	  api_key:   {from: header, name: X-API-Key}
//	  route:     {from: path, prefixes: [/export, /search]}
//	  method:    {from: method}
type RequestDescriptor struct {
	Name string // the descriptor's name
	// From is "client_ip", "header", "path" or "method".
	From string
	// Header is the header read (From "header").
	Header string
	// TrustedProxies (From "client_ip") are the peers whose
	// X-Forwarded-For is believed: the client is the nearest address in it
	// that is not a trusted proxy; a peer outside them is the client
	// itself, whatever its headers say.
	TrustedProxies []netip.Prefix
	// Prefixes (From "path"): the descriptor is the longest prefix the
	// path starts with (at a "/" boundary or exactly), both in their
	// CleanPath form, else "other"; no prefixes: the clean path itself.
	Prefixes []string
	clean    []string // Prefixes' CleanPath forms (set by Parse)
}

// RequestView is what a request says of itself, as a proxy forwards it.
type RequestView struct {
	Method string
	Path   string // as sent (escaped), without the query; read by CleanPath
	Peer   netip.Addr
	// ForwardedFor is the X-Forwarded-For header's values, as received
	// (the nearest proxy's hop last).
	ForwardedFor []string
	Header       http.Header
}

// RequestDescriptors reads p's request_descriptors from r. A header that
// is absent leaves its descriptor out (limits needing it do not apply).
// The path is read by CleanPath; a path it refuses (one servers disagree
// on) is an error, and the request is to be refused (400).
func (p *Policy) RequestDescriptors(r RequestView) (map[string]string, error) {
	out := make(map[string]string, len(p.Request))
	for _, d := range p.Request {
		switch d.From {
		case "method":
			out[d.Name] = r.Method
		case "header":
			if v := r.Header.Get(d.Header); v != "" {
				out[d.Name] = v
			}
		case "path":
			route, err := d.route(r.Path)
			if err != nil {
				return nil, fmt.Errorf("path %.80q: %v", r.Path, err)
			}
			out[d.Name] = route
		case "client_ip":
			if ip := d.clientIP(r); ip.IsValid() {
				out[d.Name] = ip.String()
			}
		}
	}
	return out, nil
}

// route is the descriptor of the path p: the longest of d's prefixes the
// clean path is under, both compared in their clean forms and the prefix
// answered as written, else "other"; with no prefixes the clean path.
func (d *RequestDescriptor) route(p string) (string, error) {
	path, err := CleanPath(p)
	if err != nil || len(d.Prefixes) == 0 {
		return path, err
	}
	best, bestLen := "", -1
	for i, pre := range d.Prefixes {
		c := pre
		if i < len(d.clean) {
			c = d.clean[i]
		} else if cp, err := CleanPath(pre); err == nil {
			c = cp // (a RequestDescriptor not made by Parse)
		}
		if len(c) > bestLen && strings.HasPrefix(path, c) && (len(path) == len(c) || path[len(c)] == '/' || strings.HasSuffix(c, "/")) {
			best, bestLen = pre, len(c)
		}
	}
	if bestLen < 0 {
		return "other", nil
	}
	return best, nil
}

// clientIP is the client's address by d's trusted proxies (ClientIP).
func (d *RequestDescriptor) clientIP(r RequestView) netip.Addr {
	return ClientIP(r.Peer, r.ForwardedFor, d.TrustedProxies)
}

// ClientIP is the client's address of a request from peer with the
// X-Forwarded-For values xff: the peer, unless it is in trusted; then
// X-Forwarded-For is read from the right, skipping trusted proxies, and
// the first other address is the client (the last one read when all are
// trusted; a malformed hop stops the reading at the hop before it). A hop
// may carry a port ("192.0.2.1:4711", "[2001:db8::1]:4711"): it is read
// as its address, for the client and for trusted's matching alike. With
// no trusted proxies X-Forwarded-For is ignored: it is the client's to
// forge. The one rule of sluice's client addresses (forward-auth,
// httplimit.ClientIP).
func ClientIP(peer netip.Addr, xff []string, trusted []netip.Prefix) netip.Addr {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	client := peer.Unmap()
	if !isTrusted(client) {
		return client
	}
	hops := strings.Split(strings.Join(xff, ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			break // a malformed hop: stop at the last good one
		}
		if client = a.Unmap(); !isTrusted(client) {
			break
		}
	}
	return client
}

// parseHop is the address of one X-Forwarded-For hop: an address
// ("192.0.2.1", "2001:db8::1"), an address with a port ("192.0.2.1:4711",
// "[2001:db8::1]:4711", as some proxies write it) or a bracketed IPv6
// address ("[2001:db8::1]"), with spaces around it; anything else
// (including "unknown" and an IPv6 address with a port but no brackets,
// which is another address) is not a hop.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// requestFrom are the sources of request_descriptors.
var requestFrom = []string{"client_ip", "header", "path", "method"}

// requestDescriptors validates the request_descriptors mapping.
func (v *validator) requestDescriptors(n *yaml.Node, p *Policy) {
	if n.Kind != yaml.MappingNode {
		v.at(n, "", "request_descriptors", "must be a mapping of descriptor names to {from: ...}")
		return
	}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		bad := func(msg string, args ...any) {
			v.at(val, "", "request_descriptors", k.Value+": "+fmt.Sprintf(msg, args...))
		}
		if !validName(k.Value) {
			v.at(k, "", "request_descriptors", fmt.Sprintf("descriptor name %q must be letters, digits, _ - or .", k.Value))
			continue
		}
		if line, dup := first[k.Value]; dup {
			v.at(k, "", "request_descriptors", fmt.Sprintf("descriptor %q given twice (first at line %d)", k.Value, line))
			continue
		}
		first[k.Value] = k.Line
		if val.Kind != yaml.MappingNode {
			bad("must be a mapping such as {from: header, name: X-API-Key}")
			continue
		}
		d := RequestDescriptor{Name: k.Value}
		ok := true
		for j := 0; j+1 < len(val.Content); j += 2 {
			fk, fv := val.Content[j], val.Content[j+1]
			switch fk.Value {
			case "from":
				d.From = fv.Value
			case "name":
				d.Header = http.CanonicalHeaderKey(fv.Value)
			case "trusted_proxies":
				if fv.Kind != yaml.SequenceNode {
					bad("trusted_proxies must be a list of addresses or CIDR prefixes, such as [127.0.0.1/32]")
					ok = false
					continue
				}
				for _, e := range fv.Content {
					pr, err := netip.ParsePrefix(e.Value)
					if err != nil {
						if a, aerr := netip.ParseAddr(e.Value); aerr == nil {
							pr = netip.PrefixFrom(a, a.BitLen())
						} else {
							bad("trusted_proxies: %q is not an address or CIDR prefix", e.Value)
							ok = false
							continue
						}
					}
					d.TrustedProxies = append(d.TrustedProxies, pr.Masked())
				}
			case "prefixes":
				if fv.Kind != yaml.SequenceNode {
					bad("prefixes must be a list of paths, such as [/export, /search]")
					ok = false
					continue
				}
				for _, e := range fv.Content {
					clean, err := CleanPath(e.Value)
					switch {
					case !strings.HasPrefix(e.Value, "/"):
						bad("prefixes: %q must start with /", e.Value)
						ok = false
					case err != nil:
						bad("prefixes: %q: %v", e.Value, err)
						ok = false
					case strings.Contains(strings.ToUpper(e.Value), ";") || strings.Contains(strings.ToUpper(e.Value), "%3B"):
						bad("prefixes: %q has ;parameters, which a path is matched without", e.Value)
						ok = false
					}
					d.Prefixes = append(d.Prefixes, e.Value)
					d.clean = append(d.clean, clean)
				}
			default:
				bad("unknown field %q (from, name, trusted_proxies, prefixes)", fk.Value)
				ok = false
			}
		}
		switch {
		case !slices.Contains(requestFrom, d.From):
			bad("from %q is not %s", d.From, orList(requestFrom))
			ok = false
		case d.From == "header" && d.Header == "":
			bad("from: header needs name (the header to read)")
			ok = false
		case d.From != "header" && d.Header != "":
			bad("name applies to from: header only")
			ok = false
		case d.From != "client_ip" && len(d.TrustedProxies) > 0:
			bad("trusted_proxies applies to from: client_ip only")
			ok = false
		case d.From != "path" && len(d.Prefixes) > 0:
			bad("prefixes applies to from: path only")
			ok = false
		}
		if ok {
			p.Request = append(p.Request, d)
		}
	}
	for _, l := range p.Limits {
		if l.Kind.HoldsSlots() {
			f := capacityField(l.Kind)
			v.add(&Error{Line: l.Line, Limit: l.Name, Field: f, Msg: "a " + f + " limit cannot be used with request_descriptors: forward-auth (/v1/auth) has no done signal to release its slot"})
		}
	}
}
