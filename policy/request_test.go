package policy_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

const requestSrc = `
request_descriptors:
  client_ip: {from: client_ip, trusted_proxies: [127.0.0.0/8, "::1"]}
  api_key:   {from: header, name: x-api-key}
  route:     {from: path, prefixes: [/export, /search, /search/deep]}
  method:    {from: method}
limits:
  - {name: per_ip, key: "ip:{client_ip}", capacity: 5, refill: 1/s}
`

func TestRequestDescriptors(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte(requestSrc))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	h := http.Header{}
	h.Set("X-API-Key", "k1")
	for _, c := range []struct {
		view policy.RequestView
		want map[string]string
	}{
		// an untrusted peer is the client, whatever its X-Forwarded-For says
		{policy.RequestView{Method: "GET", Path: "/export/all", Peer: a("203.0.113.9"), ForwardedFor: []string{"1.2.3.4"}, Header: h},
			map[string]string{"client_ip": "203.0.113.9", "api_key": "k1", "route": "/export", "method": "GET"}},
		// a trusted proxy: the nearest untrusted address of the chain
		{policy.RequestView{Method: "POST", Path: "/search/deep/x", Peer: a("127.0.0.1"), ForwardedFor: []string{"6.6.6.6, 198.51.100.7", "127.0.0.2"}},
			map[string]string{"client_ip": "198.51.100.7", "route": "/search/deep", "method": "POST"}},
		// the path as the upstream resolves it: "//export/" and "/x/../export/x" are under /export
		{policy.RequestView{Method: "GET", Path: "//export/", Peer: a("203.0.113.9")},
			map[string]string{"client_ip": "203.0.113.9", "route": "/export", "method": "GET"}},
		{policy.RequestView{Method: "GET", Path: "/x/../export/x", Peer: a("203.0.113.9")},
			map[string]string{"client_ip": "203.0.113.9", "route": "/export", "method": "GET"}},
		// all trusted: the farthest; a path no prefix matches is "other" ("/searching" is not under "/search")
		{policy.RequestView{Method: "GET", Path: "/searching", Peer: a("::1"), ForwardedFor: []string{"127.0.0.9"}},
			map[string]string{"client_ip": "127.0.0.9", "route": "other", "method": "GET"}},
	} {
		got, err := p.RequestDescriptors(c.view)
		if err != nil {
			t.Errorf("%+v: %v", c.view, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%+v: %v, want %v", c.view, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%+v: %s = %q, want %q", c.view, k, got[k], v)
			}
		}
	}
}

func TestRequestDescriptorsErrors(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"request_descriptors: {a: {from: cookie}}\n":                                                                   `from "cookie" is not`,
		"request_descriptors:\n  a: {from: method}\n  a: {from: path}\n":                                               `line 3, column 3: field "request_descriptors": descriptor "a" given twice (first at line 2)`,
		"request_descriptors: {a: {from: header}}\n":                                                                   "needs name",
		"request_descriptors: {a: {from: client_ip, trusted_proxies: [nope]}}\n":                                       `"nope" is not an address or CIDR prefix`,
		"request_descriptors: {a: {from: path, prefixes: [export]}}\n":                                                 "must start with /",
		"request_descriptors: {a: {from: method, name: X}}\n":                                                          "name applies to from: header only",
		"request_descriptors: {a: {from: method, extra: 1}}\n":                                                         `unknown field "extra"`,
		"request_descriptors: [a]\n":                                                                                   "must be a mapping",
		"request_descriptors: {a: {from: method}}\nlimits:\n  - {name: c, key: x, max_in_flight: 2, lease_ttl: 30s}\n": "forward-auth (/v1/auth) has no done signal",
	} {
		if !strings.Contains(src, "limits:") {
			src += "limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n"
		}
		if _, err := policy.Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

// shadow is a YAML boolean: true, True or false; a quoted string or yes is
// an error.
func TestShadowIsABoolean(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"true": true, "True": true, "false": false} {
		p, err := policy.Parse([]byte("limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s, shadow: " + v + "}\n"))
		if err != nil || p.Limits[0].Shadow != want {
			t.Errorf("shadow: %s: %v %v", v, err, err == nil && p.Limits[0].Shadow)
		}
	}
	for _, v := range []string{`"true"`, "yes", "1"} {
		if _, err := policy.Parse([]byte("limits:\n  - {name: a, key: x, capacity: 1, refill: 1/s, shadow: " + v + "}\n")); err == nil || !strings.Contains(err.Error(), "is not true or false") {
			t.Errorf("shadow: %s: %v", v, err)
		}
	}
}

// An X-Forwarded-For hop written with a port ("ip:port", "[v6]:port") or
// as a bracketed IPv6 address is read as its address, for the client and
// for matching trusted_proxies alike.
func TestClientIPHopsWithPorts(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	peer := netip.MustParseAddr("127.0.0.1")
	for xff, want := range map[string]string{
		"198.51.100.7:4711":                              "198.51.100.7",
		"[2001:db8::7]:4711":                             "2001:db8::7",
		"[2001:db8::7]":                                  "2001:db8::7",
		" 198.51.100.7:4711 , 127.0.0.2:80":              "198.51.100.7", // a trusted hop with a port is skipped
		"198.51.100.7, [2001:db8:ffff::1]:443":           "198.51.100.7", // (an IPv6 one too)
		"6.6.6.6, 198.51.100.7:1, [2001:db8:ffff::9]:80": "198.51.100.7",
		"[::ffff:198.51.100.7]:80":                       "198.51.100.7",   // unmapped, as a bare hop is
		"2001:db8::7:80":                                 "2001:db8::7:80", // no brackets: an address, not a port
		"198.51.100.7:99999, 127.0.0.3":                  "127.0.0.3",      // a bad port: not a hop, the reading stops
		"[198.51.100.7]:80, 127.0.0.3":                   "127.0.0.3",
		"unknown:80":                                     "127.0.0.1",
	} {
		if got := policy.ClientIP(peer, []string{xff}, trusted); got.String() != want {
			t.Errorf("X-Forwarded-For %q: %v, want %s", xff, got, want)
		}
	}
	if got := policy.ClientIP(netip.MustParseAddr("203.0.113.1"), []string{"198.51.100.7:4711"}, trusted); got.String() != "203.0.113.1" {
		t.Errorf("rule: an untrusted peer is the client, whatever its header says: %v", got)
	}
}

// Whatever X-Forwarded-For says, the client is the peer or one of its
// hops' addresses; an untrusted peer is the client; a hop's port changes
// nothing.
func FuzzClientIP(f *testing.F) {
	f.Add("127.0.0.1", "198.51.100.7:4711, 127.0.0.2")
	f.Add("127.0.0.1", "[2001:db8::7]:80,[::1]:1")
	f.Add("::1", "unknown, 1.2.3.4")
	f.Add("203.0.113.1", "127.0.0.9")
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	f.Fuzz(func(t *testing.T, peerS, xff string) {
		peer, err := netip.ParseAddr(peerS)
		if err != nil {
			return
		}
		got := policy.ClientIP(peer, []string{xff}, trusted)
		if !got.IsValid() {
			t.Fatalf("%v %q: no client", peer, xff)
		}
		trustedPeer := false
		for _, p := range trusted {
			trustedPeer = trustedPeer || p.Contains(peer.Unmap())
		}
		if !trustedPeer && got != peer.Unmap() {
			t.Fatalf("%v %q: an untrusted peer is the client, got %v", peer, xff, got)
		}
		if _, ok := anyHop(xff, got); got != peer.Unmap() && !ok {
			t.Fatalf("%v %q: %v is neither the peer nor a hop", peer, xff, got)
		}
		// the same chain with a port on every hop reads alike
		var withPorts []string
		for _, h := range strings.Split(xff, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(h))
			if err != nil {
				withPorts = nil
				break
			}
			withPorts = append(withPorts, netip.AddrPortFrom(a, 80).String())
		}
		if withPorts != nil {
			if g2 := policy.ClientIP(peer, withPorts, trusted); g2 != got {
				t.Fatalf("%v %q: %v, but with ports %q: %v", peer, xff, got, withPorts, g2)
			}
		}
	})
}

// anyHop reports whether one of xff's hops is the address a (written as an
// address, with a port, or bracketed), and which.
func anyHop(xff string, a netip.Addr) (string, bool) {
	for _, h := range strings.Split(xff, ",") {
		h = strings.TrimSpace(h)
		for _, s := range []string{h, strings.Trim(h, "[]")} {
			if b, err := netip.ParseAddr(s); err == nil && b.Unmap() == a {
				return h, true
			}
		}
		if ap, err := netip.ParseAddrPort(h); err == nil && ap.Addr().Unmap() == a {
			return h, true
		}
	}
	return "", false
}
