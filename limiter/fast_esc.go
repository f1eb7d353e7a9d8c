// The fast path's escaping of a descriptor's value: a value with none of
// the bytes to escape (the usual case) found so by words, not bytes.

package limiter

import (
	"encoding/binary"
	"unsafe"
)

// fastPlain reports whether v holds none of the bytes fastEsc escapes
// ('%', ':', '{' and '}'): eight bytes at a time (the last word overlapping
// the one before it), a short value as two overlapping halves.
func fastPlain(v string) bool {
	n := len(v)
	if n < 4 {
		for i := 0; i < n; i++ {
			if c := v[i]; c == '%' || c == ':' || c == '{' || c == '}' {
				return false
			}
		}
		return true
	}
	b := unsafe.Slice(unsafe.StringData(v), n)
	if n < 8 {
		return !fastSpecial(uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<32)
	}
	for i := 0; i+8 < n; i += 8 {
		if fastSpecial(binary.LittleEndian.Uint64(b[i:])) {
			return false
		}
	}
	return !fastSpecial(binary.LittleEndian.Uint64(b[n-8:]))
}

// fastSpecial reports whether a byte of x is '%', ':', '{' or '}': a byte
// equal to c makes y = x^(c*ones) hold a zero byte, which (y-ones)&^y
// marks in its high bit, exactly (whichever other bytes are).
func fastSpecial(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	a, b, c, d := x^('%'*ones), x^(':'*ones), x^('{'*ones), x^('}'*ones)
	return ((a-ones)&^a|(b-ones)&^b|(c-ones)&^c|(d-ones)&^d)&highs != 0
}
