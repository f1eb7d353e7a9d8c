// The request path as sluice matches it (CleanPath): percent-escapes
// decoded and dot segments resolved as servers resolve them, and the
// paths servers disagree on refused.

package policy

import (
	"errors"
	"strings"
)

// CleanPath is the request path p (as sent: escaped, without the query)
// in the form request_descriptors match: the path every server that
// decodes and resolves it serves, so that an escape cannot move a
// request out of a prefix. It is, in order:
//
//   - every percent-escape decoded once (%65 is e, %2E is ".", %7E is "~",
//     %25 is "%"), hex in either case; then re-encoded canonically: the
//     bytes that are not unreserved, sub-delims, ":" or "@" as %XX in upper
//     case ("/caf%c3%a9", "/café" and "/caf%C3%A9" are one path);
//   - separated at "/", and also at an encoded slash (%2F) and at a
//     backslash (\ or %5C), which nginx, Go servers or Windows servers read
//     as "/";
//   - each segment's ";" parameters (from ";" or %3B to the segment's end)
//     removed, as servlet containers do: "/export;x" is "/export";
//   - dot segments resolved (RFC 3986 5.2.4; ".." at the root is dropped)
//     and empty segments removed ("//" is "/"); a trailing "/" is kept, and
//     a path ending in a dot segment ends in "/".
//
// p is refused (an error) where servers disagree on what it names, so that
// no choice of reading could let it escape: a NUL (%00), a malformed
// escape, a dot segment with parameters ("..;x", which servlet containers
// resolve and others do not), an encoded slash or a backslash in a path
// with a dot segment or parameters (servers that keep %2F inside a segment
// resolve "%2F..%2F" otherwise than those that split at it), and an empty
// segment in a path with a ".." segment (servers that merge "//" before
// resolving ".." and those that do not reach different paths).
//
// The result starts with "/", has no empty, "." or ".." segment, no ";",
// no backslash and no escape of a character it could hold as itself, and
// CleanPath of it is itself.
func CleanPath(p string) (string, error) {
	var (
		segs                          []string // the segments, resolved
		cur                           strings.Builder
		inParams, params, encSep      bool // in a segment's parameters; any parameters; any %2F, %5C or \
		dot, dotdot, empty, lastSlash bool
	)
	// end closes the current segment; sep says it ends at a separator
	// (else at the path's end).
	end := func(sep bool) error {
		s := cur.String()
		cur.Reset()
		hadParams := inParams
		inParams = false
		switch s {
		case ".", "..":
			if hadParams {
				return errors.New("a dot segment with ;parameters (servers disagree on it)")
			}
			dot = true
			if s == ".." {
				dotdot = true
				if len(segs) > 0 {
					segs = segs[:len(segs)-1]
				}
			}
			lastSlash = true
		case "":
			if sep || hadParams {
				empty = true
			}
			lastSlash = true
		default:
			segs = append(segs, s)
			lastSlash = false
		}
		return nil
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	for i := 1; i < len(p); i++ {
		c := p[i]
		if c == '/' {
			if err := end(true); err != nil {
				return "", err
			}
			continue
		}
		if c == '%' {
			if i+2 >= len(p) || unhex(p[i+1]) < 0 || unhex(p[i+2]) < 0 {
				return "", errors.New("a malformed percent-escape")
			}
			c = byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			i += 2
			if c == '/' {
				encSep = true
				if err := end(true); err != nil {
					return "", err
				}
				continue
			}
		}
		switch {
		case c == 0:
			return "", errors.New("a NUL (%00)")
		case c == '\\':
			encSep = true
			if err := end(true); err != nil {
				return "", err
			}
		case c == ';':
			inParams, params = true, true
		case inParams:
		case pathByte(c):
			cur.WriteByte(c)
		default:
			cur.WriteByte('%')
			cur.WriteByte("0123456789ABCDEF"[c>>4])
			cur.WriteByte("0123456789ABCDEF"[c&15])
		}
	}
	if err := end(false); err != nil {
		return "", err
	}
	switch {
	case encSep && (dot || params):
		return "", errors.New("an encoded slash or a backslash with a dot segment or ;parameters (servers disagree on it)")
	case empty && dotdot:
		return "", errors.New(`an empty segment ("//") with a ".." segment (servers disagree on it)`)
	}
	out := "/" + strings.Join(segs, "/")
	if lastSlash && len(segs) > 0 {
		out += "/"
	}
	return out, nil
}

// pathByte reports whether c stands for itself in a clean path: unreserved
// (RFC 3986 2.3), a sub-delim other than ";", ":" or "@".
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,=:@", c) >= 0
}

// unhex is the value of the hex digit c, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
