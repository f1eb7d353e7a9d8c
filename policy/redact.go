// Redaction: descriptor values shown hashed in logs and key listings (Redacts, DisplayKey).

package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// Redacts reports whether p redacts the values of descriptor name (it is in
// p.Redact). A nil p redacts nothing.
func (p *Policy) Redacts(name string) bool {
	return p != nil && slices.Contains(p.Redact, name)
}

// DisplayKey is l.Match for logs and key listings: the same key, except
// that the value of each placeholder whose descriptor p redacts is
// replaced by "#" and the first 8 lower-case hex digits of the SHA-256 of
// the raw (unescaped) value, so "api_key:{api_key}" with api_key "secret"
// displays as "api_key:#2bb80d53". A key with no redacted placeholder
// displays exactly as Match returns it. The hash is stable (the same value
// always displays alike, in every process and policy version), so log
// lines can be correlated; it is not keyed, so it hides a value from a
// reader but not from someone who can guess it and hash the guess.
func (p *Policy) DisplayKey(l *Limit, desc map[string]string) (string, bool) {
	b, ok := p.AppendDisplayKey(nil, l, desc)
	return string(b), ok
}

// AppendDisplayKey is DisplayKey appending the key to dst; on false dst is
// returned unchanged. It does not allocate when dst has room for the
// displayed key plus the longest redacted value (the room past the key
// holds a value while it is hashed).
func (p *Policy) AppendDisplayKey(dst []byte, l *Limit, desc map[string]string) ([]byte, bool) {
	return l.appendKey(dst, desc, p)
}

// appendRedacted appends "#" and the first 8 hex digits of SHA-256(val).
func appendRedacted(dst []byte, val string) []byte {
	// Hash a copy in dst's spare room: sha256.Sum256([]byte(val)) would
	// allocate for values over 32 bytes.
	n := len(dst)
	dst = append(dst, val...)
	sum := sha256.Sum256(dst[n:])
	dst = append(dst[:n], '#')
	return hex.AppendEncode(dst, sum[:4])
}

// RedactValue is a redacted descriptor's value as keys show it: "#" and
// the first 8 hex digits of its SHA-256 (the audit log shows descriptors
// so).
func RedactValue(val string) string { return string(appendRedacted(nil, val)) }
