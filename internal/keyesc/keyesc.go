// Package keyesc escapes descriptor values into store keys: '%' and the
// characters a key format reserves become %XX (two upper-case hex
// digits), so that distinct values never render alike. The policy's keys,
// the Envoy service's keys and the Redis book's request ids each escape
// their own separators with it.
package keyesc

const hexDigits = "0123456789ABCDEF"

// PolicyKey is what a policy key reserves besides '%': the separator ':'
// and a hash tag's braces. The policy's key renderer, the limiter's
// compiled one and a shared gate's keys escape these.
const PolicyKey = ":{}"

// Set is a set of bytes to escape besides '%', looked up by table.
type Set struct{ esc [256]bool }

// NewSet returns the set of '%' and the bytes of special.
func NewSet(special string) *Set {
	s := &Set{}
	s.esc['%'] = true
	for i := 0; i < len(special); i++ {
		s.esc[special[i]] = true
	}
	return s
}

// Append appends s to b with '%' and the set's bytes as %XX.
func (set *Set) Append(b []byte, s string) []byte {
	i := 0
	for i < len(s) && !set.esc[s[i]] {
		i++
	}
	if i == len(s) {
		return append(b, s...)
	}
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		if c := s[i]; set.esc[c] {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// Append appends s to b with '%' and the bytes of special as %XX (a Set
// made on each call: callers on a hot path keep a Set).
func Append(b []byte, s, special string) []byte { return NewSet(special).Append(b, s) }
