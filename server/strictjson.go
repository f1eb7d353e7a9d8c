// Strict JSON names: the scan that refuses duplicate keys and field names
// in another case, which encoding/json accepts (last wins; "COST" is cost).
package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// nameError is a key the strict scan refuses.
type nameError struct{ msg string }

func (e *nameError) Error() string { return e.msg }

// errNotJSON stops the scan of malformed JSON: the decoder reports it.
var errNotJSON = errors.New("malformed JSON")

// maxScanDepth bounds the scan's nesting, as encoding/json's own limit
// (10,000) bounds the decoder's.
const maxScanDepth = 10000

// checkNames scans the first JSON value of body against the Go type t (the
// type decoded into) and reports, as encoding/json/v2 does by default:
//   - a key given twice in one object, at any depth ("descriptors" too);
//   - a key of an object decoded into a struct that is not exactly one of
//     the struct's JSON field names (encoding/json matches them in any
//     case: "COST" would set cost), with the field meant when only the
//     case differs.
//
// Keys are compared as the decoder reads them ("co\u0073t" is "cost", and
// invalid UTF-8 is U+FFFD). Malformed JSON
// is not its business: it returns nil and leaves the error to the decoder
// (whatever the scan made of it, the body is then refused). It allocates
// only for escaped keys and for the path of nested objects.
func checkNames(body []byte, t reflect.Type) error {
	s := scanner{b: body}
	var ne *nameError
	if err := s.value(t, "", 0); errors.As(err, &ne) {
		return ne
	}
	return nil
}

// scanner walks JSON text; i is the next byte.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value; t is the Go type it decodes into (nil when
// unknown: only duplicates are looked for), path the keys leading to it.
func (s *scanner) value(t reflect.Type, path string, depth int) error {
	if depth > maxScanDepth {
		return errNotJSON
	}
	s.space()
	if s.i >= len(s.b) {
		return errNotJSON
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch s.b[s.i] {
	case '{':
		return s.object(t, path, depth)
	case '[':
		s.i++
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		s.space()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.value(elem, path, depth+1); err != nil {
				return err
			}
			s.space()
			if s.i >= len(s.b) {
				return errNotJSON
			}
			s.i++
			switch s.b[s.i-1] {
			case ',':
			case ']':
				return nil
			default:
				return errNotJSON
			}
		}
	case '"':
		_, _, err := s.str()
		return err
	}
	// A number, true, false or null (checked by the decoder): up to the
	// next delimiter.
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r', '"', '{', '[', ':':
			return nil
		}
		s.i++
	}
	return nil
}

// str scans a string at s.i and returns its bytes between the quotes and
// whether they hold an escape.
func (s *scanner) str() (raw []byte, escaped bool, err error) {
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			s.i = j + 1
			return s.b[start:j], escaped, nil
		}
	}
	return nil, false, errNotJSON
}

// object scans an object at s.i.
func (s *scanner) object(t reflect.Type, path string, depth int) error {
	s.i++
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = jsonFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	var buf [8][]byte
	seen := buf[:0] // (a few keys an object: a list is cheaper than a map)
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return errNotJSON
		}
		key, escaped, err := s.str()
		if err != nil {
			return err
		}
		if escaped || !utf8.Valid(key) { // (as the decoder reads it: invalid UTF-8 is U+FFFD)
			var k string
			if json.Unmarshal(s.b[s.i-len(key)-2:s.i], &k) != nil {
				return errNotJSON
			}
			key = []byte(k)
		}
		for _, k := range seen {
			if bytes.Equal(k, key) {
				if path == "" {
					return &nameError{fmt.Sprintf("field %q is given twice", key)}
				}
				return &nameError{fmt.Sprintf("field %q: key %q is given twice", path, key)}
			}
		}
		seen = append(seen, key)
		vt := elem
		if fields != nil {
			ft, ok := fields[string(key)]
			if !ok {
				return &nameError{unknownField(path, string(key), fields)}
			}
			vt = ft
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errNotJSON
		}
		s.i++
		s.space()
		sub := path
		if s.i < len(s.b) && (s.b[s.i] == '{' || s.b[s.i] == '[') {
			// (named in the messages of what it holds)
			if sub = string(key); path != "" {
				sub = path + "." + sub
			}
		}
		if err := s.value(vt, sub, depth+1); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) {
			return errNotJSON
		}
		s.i++
		switch s.b[s.i-1] {
		case ',':
		case '}':
			return nil
		default:
			return errNotJSON
		}
	}
}

// unknownField says that key is not a field, naming the field it matches
// in another case.
func unknownField(path, key string, fields map[string]reflect.Type) string {
	msg := fmt.Sprintf("unknown field %q", key)
	if path != "" {
		msg = fmt.Sprintf("field %q: unknown field %q", path, key)
	}
	for name := range fields {
		if strings.EqualFold(name, key) {
			return msg + fmt.Sprintf(" (field names are case-sensitive: did you mean %q?)", name)
		}
	}
	return msg
}

// fieldsOf caches jsonFields by type.
var fieldsOf sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the JSON names of struct type t's exported fields (their
// json tag's name, else the Go name) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = f.Type
	}
	fieldsOf.Store(t, out)
	return out
}
