// The compact path of the JSON decoders: an object written without
// whitespace, as MarshalJSON writes it, split without encoding/json and
// decoded by the same field decoders, with the same result.

package overrides

import "unicode/utf8"

// decodeCompact decodes b into o through fields when b is one JSON object
// without whitespace whose keys are field names written plainly (no
// escape) and whose values are strings, numbers, true, false, null, or
// objects of strings (match), and reports whether it did, without error.
// When it did, o is what decodeObject decodes from b; when not, o holds
// part of b and the caller decodes b again from the zero Override with
// decodeObject, which gives the answer and its error.
func decodeCompact(b []byte, o *Override, fields map[string]field) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	var names [24]string
	seen := seenFields{names: names[:0]}
	i := 1
	for b[i] != '}' {
		if b[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j >= len(b) || b[j] != '"' {
			return false
		}
		key, ok := fieldNames[string(b[i+1:j])]
		if !ok || j+1 >= len(b) || b[j+1] != ':' {
			return false
		}
		end := valueEnd(b, j+2)
		if end < 0 || end >= len(b) || member(o, fields, &seen, key, b[j+2:end]) != nil {
			return false
		}
		switch i = end; b[i] {
		case ',':
			if i++; b[i] == '}' {
				return false // (a trailing comma)
			}
		case '}':
		default:
			return false
		}
	}
	return i == len(b)-1 && missing(o, fields, &seen) == nil
}

// fieldNames are the names of the fields of records and requests, each
// mapped to itself (a key of the input becomes one without a copy).
var fieldNames = func() map[string]string {
	m := map[string]string{}
	for name := range recordFields {
		m[name] = name
	}
	return m
}()

// valueEnd returns the end of the JSON value that starts at b[i], or -1
// when there is none there (or one decodeCompact leaves to encoding/json:
// an array, an object of anything but strings).
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return stringEnd(b, i)
	case c == '{':
		i++
		if i < len(b) && b[i] == '}' {
			return i + 1
		}
		for i < len(b) {
			if i = stringEnd(b, i); i < 0 || i >= len(b) || b[i] != ':' {
				return -1
			}
			if i = stringEnd(b, i+1); i < 0 || i >= len(b) {
				return -1
			}
			switch b[i] {
			case '}':
				return i + 1
			case ',':
				i++
			default:
				return -1
			}
		}
		return -1
	case c == 't':
		return literalEnd(b, i, "true")
	case c == 'f':
		return literalEnd(b, i, "false")
	case c == 'n':
		return literalEnd(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return numberEnd(b, i)
	}
	return -1
}

func literalEnd(b []byte, i int, lit string) int {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
}

// stringEnd returns the end of the JSON string that starts at b[i] (after
// its closing quote), or -1: no quote there, a control character, or an
// escape JSON does not have.
func stringEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 6 {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1
					}
				}
				i += 5
			default:
				return -1
			}
		}
	}
	return -1
}

// numberEnd returns the end of the JSON number that starts at b[i], or -1.
func numberEnd(b []byte, i int) int {
	digits := func(i int) int {
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	default:
		if i = digits(i); i < 0 {
			return -1
		}
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}

// plainString reports whether raw is a JSON string that encoding/json
// decodes to its bytes between the quotes: no escape, no control
// character, valid UTF-8.
func plainString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	ascii := true
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
		ascii = ascii && c < 0x80
	}
	return ascii || utf8.Valid(raw[1:len(raw)-1])
}

// splitMatch decodes raw, a match, when it is an object without
// whitespace of plain strings (plainString) with distinct keys: the map
// decodeMatch's encoding/json path would make of it.
func splitMatch(raw []byte) (map[string]string, bool) {
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return nil, false
	}
	n := 0
	for _, c := range raw {
		if c == ':' {
			n++
		}
	}
	m := make(map[string]string, n)
	i := 1
	for raw[i] != '}' {
		k := stringEnd(raw, i)
		if k < 0 || k >= len(raw) || raw[k] != ':' || !plainString(raw[i:k]) {
			return nil, false
		}
		v := stringEnd(raw, k+1)
		if v < 0 || v >= len(raw) || !plainString(raw[k+1:v]) {
			return nil, false
		}
		key := string(raw[i+1 : k-1])
		if _, dup := m[key]; dup {
			return nil, false
		}
		m[key] = string(raw[k+2 : v-1])
		switch i = v; raw[i] {
		case ',':
			if i++; raw[i] == '}' {
				return nil, false
			}
		case '}':
		default:
			return nil, false
		}
	}
	return m, i == len(raw)-1
}
