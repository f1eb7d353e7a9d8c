package policy_test

// Tests of CleanPath: the path request_descriptors match, and the fuzz
// test that no server's reading of a path puts it under a prefix sluice
// does not.

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                   "/",
		"/":                  "/",
		"export":             "/export",
		"/export":            "/export",
		"/export/":           "/export/",
		"//export//x":        "/export/x",
		"/x/../export/":      "/export/",
		"/../export":         "/export",
		"/export/.":          "/export/",
		"/export/x/..":       "/export/",
		"/%65xport":          "/export",      // an escaped unreserved character
		"/%45XPORT":          "/EXPORT",      // (paths are case-sensitive)
		"/a/%2e%2e/export":   "/export",      // escaped dots are dots
		"/a/.%2E/export":     "/export",      //
		"/export%3bx":        "/export",      // %3B starts parameters, as ";" does
		"/export;jsessionid": "/export",      // parameters removed, as servlet containers do
		"/a;x/b;y=1,2/c":     "/a/b/c",       //
		"/export%2Fx":        "/export/x",    // an encoded slash is a separator
		"/export%5Cx":        "/export/x",    // and a backslash
		`/export\x`:          "/export/x",    //
		"/caf%c3%a9":         "/caf%C3%A9",   // other escapes: canonical, upper case
		"/café":              "/caf%C3%A9",   //
		"/a%21b%40c%3Ad":     "/a!b@c:d",     // sub-delims, ":" and "@" stand for themselves
		"/a b?#":             "/a%20b%3F%23", // bytes that need escaping are escaped
		"/100%25":            "/100%25",      // decoded once: %25 stays a "%"
		"/%252e%252e/x":      "/%252e%252e/x",
		"/x/%2e%2e%2e":       "/x/...",
	} {
		got, err := policy.CleanPath(in)
		if err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
		if again, err := policy.CleanPath(got); err != nil || again != got {
			t.Errorf("CleanPath(%q) = %q, %v: not idempotent", got, again, err)
		}
	}
	for in, want := range map[string]string{
		"/a/..;/export":        "dot segment with ;parameters",
		"/a/%2e%2e%3bx/export": "dot segment with ;parameters",
		"/a/.;x/export":        "dot segment with ;parameters",
		"/a%2F..%2Fexport":     "encoded slash or a backslash",
		"/a/b%2F../export":     "encoded slash or a backslash",
		`/a\..\export`:         "encoded slash or a backslash",
		"/a%5C..%5Cexport":     "encoded slash or a backslash",
		"/x;%2F..%2Fexport":    "encoded slash or a backslash",
		"/x;a/y%2Fz":           "encoded slash or a backslash",
		"/export//..":          "empty segment",
		"/a//../export":        "empty segment",
		"/export/;x/..":        "empty segment",
		"/export%00":           "NUL",
		"/export%zz":           "malformed",
		"/export%4":            "malformed",
	} {
		if got, err := policy.CleanPath(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CleanPath(%q) = %q, %v; want an error with %q", in, got, err, want)
		}
	}
}

// The three paths, and the tricks of their kind, are under
// /export; a path servers disagree on is an error; a prefix is compared
// in its clean form and answered as written.
func TestRequestDescriptorsPathTricks(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte("request_descriptors:\n  route: {from: path, prefixes: [/export, /caf%c3%a9]}\nlimits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	route := func(path string) (string, error) {
		d, err := p.RequestDescriptors(policy.RequestView{Path: path, Peer: netip.MustParseAddr("192.0.2.1")})
		return d["route"], err
	}
	for _, path := range []string{"/%65xport", "/a/%2e%2e/export", "/export%3bx", "/export;x", "/%65xport/x", "/EXPORT/../export", "/export%2Fx"} {
		if r, err := route(path); err != nil || r != "/export" {
			t.Errorf("rule: %q is under /export: %q %v", path, r, err)
		}
	}
	for _, path := range []string{"/exportx", "/%65xportx", "/export%2e", "/expor%74%3B/../x"} {
		if r, err := route(path); err != nil || r != "other" {
			t.Errorf("%q is not under /export: %q %v", path, r, err)
		}
	}
	if r, err := route("/café/x"); err != nil || r != "/caf%c3%a9" {
		t.Errorf("rule: a prefix matches in its clean form, answered as written: %q %v", r, err)
	}
	if _, err := route("/a%2F..%2Fexport"); err == nil || !strings.Contains(err.Error(), `path "/a%2F..%2Fexport": an encoded slash`) {
		t.Errorf("rule: a path servers disagree on is an error naming it: %v", err)
	}
	for src, want := range map[string]string{
		"[/a;b]":        "has ;parameters",
		"[/a%3Bb]":      "has ;parameters",
		"[/a%2F../b]":   "encoded slash",
		"[/a%zz]":       "malformed",
		"[/ok, export]": "must start with /",
	} {
		_, err := policy.Parse([]byte("request_descriptors:\n  route: {from: path, prefixes: " + src + "}\nlimits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("prefixes %s: %v, want %q", src, err, want)
		}
	}
}

// reading is how one kind of server names a raw request path: its
// segments, decoded, a trailing "" when it ends in "/"; ok false when the
// server refuses the path.
type reading func(raw string) (segs []string, ok bool)

// decode percent-decodes s once.
func decode(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// resolve removes dot segments (RFC 3986 5.2.4) from segs, merging empty
// segments first if merge (as nginx and path.Clean do).
func resolve(segs []string, merge bool) []string {
	var out []string
	for i, s := range segs {
		last := i == len(segs)-1
		switch {
		case s == "" && merge && !last:
		case s == ".":
			if last {
				out = append(out, "")
			}
		case s == "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return out
}

// stripParams removes s's ";" parameters.
func stripParams(s string) string {
	if i := strings.IndexByte(s, ';'); i >= 0 {
		return s[:i]
	}
	return s
}

// readings are the ways servers read a path: decoding all of it and
// splitting at every "/" (nginx, Go's path.Clean of r.URL.Path), with and
// without merging "//" first; decoding each segment, an encoded slash
// kept inside it (Go's ServeMux patterns, APIs such as GitLab's); a
// servlet container (";" parameters removed per segment before decoding,
// an encoded slash a separator or kept); a Windows server ("\" is "/");
// and decoding before removing parameters.
var readings = map[string]reading{
	"decode-all": func(raw string) ([]string, bool) {
		d, ok := decode(raw)
		return resolve(strings.Split(d, "/")[1:], true), ok
	},
	"decode-all-no-merge": func(raw string) ([]string, bool) {
		d, ok := decode(raw)
		return resolve(strings.Split(d, "/")[1:], false), ok
	},
	"per-segment": func(raw string) ([]string, bool) {
		segs := strings.Split(raw, "/")[1:]
		for i, s := range segs {
			d, ok := decode(s)
			if !ok {
				return nil, false
			}
			segs[i] = d
		}
		return resolve(segs, false), true
	},
	"servlet": func(raw string) ([]string, bool) {
		segs := strings.Split(raw, "/")[1:]
		for i, s := range segs {
			segs[i] = stripParams(s)
		}
		d, ok := decode(strings.Join(segs, "/"))
		return resolve(strings.Split(d, "/"), true), ok
	},
	"servlet-encoded-slash-kept": func(raw string) ([]string, bool) {
		segs := strings.Split(raw, "/")[1:]
		for i, s := range segs {
			d, ok := decode(stripParams(s))
			if !ok {
				return nil, false
			}
			segs[i] = d
		}
		return resolve(segs, true), true
	},
	"windows": func(raw string) ([]string, bool) {
		d, ok := decode(raw)
		return resolve(strings.Split(strings.ReplaceAll(d, `\`, "/"), "/")[1:], true), ok
	},
	"decode-then-params": func(raw string) ([]string, bool) {
		d, ok := decode(raw)
		segs := strings.Split(d, "/")[1:]
		for i, s := range segs {
			segs[i] = stripParams(s)
		}
		return resolve(segs, true), ok
	},
}

// under reports whether segs are under the prefix pre (decoded segments,
// as the prefix matching of request_descriptors says).
func under(segs []string, pre string) bool {
	d, _ := decode(pre)
	want := strings.Split(strings.TrimSuffix(d, "/"), "/")[1:]
	n := len(want)
	if strings.HasSuffix(d, "/") {
		n++ // "/export/" needs a segment after export
	}
	if len(segs) < n {
		return false
	}
	for i, w := range want {
		if segs[i] != w {
			return false
		}
	}
	return true
}

// fuzzPrefixes are the prefixes FuzzCleanPath checks, one descriptor each
// (and nested, in "nested").
var fuzzPrefixes = []string{"/export", "/export/", "/a/b", "/caf%C3%A9", "/x!y", "/e.x"}

// Whatever the path, CleanPath is idempotent and clean, and no server's
// reading of it (readings) puts it under a prefix that sluice does not
// count it under (it is refused, or under that prefix or a longer one).
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/%65xport", "/a/%2e%2e/export", "/export%3bx", "/a/..;/export", "/a%2F..%2Fexport",
		`/a\..\export`, "//export", "/export//..", "/x;%2F..%2Fexport", "/a/b%2Fc", "/export/;x/..", "/caf%c3%a9/x",
		"/x%21y", "/e%2Ex", "/export/.", "/%2e%2e/export", "/a/.%2e/b/", "/export/x/../../a/b", "/export/x%2F..%2F..%2Fy", "/export/..;/x", "/export/x;%2F..%2F..%2Fy"} {
		f.Add(s)
	}
	src := "request_descriptors:\n"
	for i, p := range fuzzPrefixes {
		src += fmt.Sprintf("  r%d: {from: path, prefixes: [%q]}\n", i, p)
	}
	src += "  nested: {from: path, prefixes: [/a, /a/b, /export, /export/x]}\n  whole: {from: path}\nlimits:\n  - {name: a, key: x, capacity: 1, refill: 1/s}\n"
	pol, err := policy.Parse([]byte(src))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		raw = "/" + strings.TrimPrefix(raw, "/")
		clean, err := policy.CleanPath(raw)
		d, derr := pol.RequestDescriptors(policy.RequestView{Path: raw})
		if (err == nil) != (derr == nil) {
			t.Fatalf("%q: CleanPath %v, RequestDescriptors %v", raw, err, derr)
		}
		if err != nil {
			return // refused: nothing to escape
		}
		if again, err := policy.CleanPath(clean); err != nil || again != clean {
			t.Fatalf("%q: CleanPath %q, then %q %v: not idempotent", raw, clean, again, err)
		}
		if d["whole"] != clean || !strings.HasPrefix(clean, "/") || strings.Contains(clean, "//") || strings.ContainsAny(clean, `;\`) ||
			strings.Contains(clean, "/./") || strings.Contains(clean, "/../") || strings.HasSuffix(clean, "/.") || strings.HasSuffix(clean, "/..") {
			t.Fatalf("%q: CleanPath %q is not clean", raw, clean)
		}
		for name, read := range readings {
			segs, ok := read(raw)
			if !ok {
				continue
			}
			for i, pre := range fuzzPrefixes {
				if under(segs, pre) && d[fmt.Sprint("r", i)] != pre {
					t.Fatalf("%q: %s reads it as %q, under %s, but sluice's route is %q (CleanPath %q)", raw, name, segs, pre, d[fmt.Sprint("r", i)], clean)
				}
			}
			for _, pre := range []string{"/a", "/a/b", "/export", "/export/x"} {
				if under(segs, pre) && !strings.HasPrefix(d["nested"], pre) {
					t.Fatalf("%q: %s reads it as %q, under %s, but sluice's route is %q (CleanPath %q)", raw, name, segs, pre, d["nested"], clean)
				}
			}
		}
	})
}
