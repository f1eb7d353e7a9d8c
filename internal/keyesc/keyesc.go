// Package keyesc percent-encodes the bytes that separate the parts of a
// store key, so that distinct parts never render to the same key.
package keyesc

const hexDigits = "0123456789ABCDEF"

// Append appends s to b with '%' and every byte of special written as
// "%XX" (upper-case hex). It copies s unchanged when none occurs.
func Append(b []byte, s, special string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] != '%' && !contains(special, s[i])
	}
	if plain {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || contains(special, c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

func contains(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}
