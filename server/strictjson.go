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
)

// nameError is a key the strict scan refuses.
type nameError struct{ msg string }

func (e *nameError) Error() string { return e.msg }

// checkNames scans the first JSON value of body against the Go type t (the
// type decoded into) and reports, as encoding/json/v2 does by default:
//   - a key given twice in one object, at any depth ("descriptors" too);
//   - a key of an object decoded into a struct that is not exactly one of
//     the struct's JSON field names (encoding/json matches them in any
//     case: "COST" would set cost), with the field meant when only the
//     case differs.
//
// Malformed JSON is not its business: it returns nil and leaves the error
// to the decoder.
func checkNames(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var ne *nameError
	if err := scanNames(dec, t, ""); errors.As(err, &ne) {
		return ne
	}
	return nil
}

// scanNames reads one value from dec; t is the Go type it decodes into (nil
// when unknown: only duplicates are looked for), path the keys leading to it.
func scanNames(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := scanNames(dec, elem, path); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	case json.Delim('{'):
	default:
		return nil // a scalar
	}
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
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			if path == "" {
				return &nameError{fmt.Sprintf("field %q is given twice", key)}
			}
			return &nameError{fmt.Sprintf("field %q: key %q is given twice", path, key)}
		}
		seen[key] = true
		vt := elem
		if fields != nil {
			ft, ok := fields[key]
			if !ok {
				return &nameError{unknownField(path, key, fields)}
			}
			vt = ft
		}
		sub := key
		if path != "" {
			sub = path + "." + key
		}
		if err := scanNames(dec, vt, sub); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
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

// jsonFields maps the JSON names of struct type t's exported fields (their
// json tag's name, else the Go name) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
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
	return out
}
