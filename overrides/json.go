// JSON of overrides: the encoding the API answers with, the strict
// decoders of request bodies and records, and the canonical match.
package overrides

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// TimeFormat is how overrides' times are written: RFC 3339 in UTC with
// milliseconds ("2026-12-02T00:52:07.123Z").
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// CanonicalMatch is the canonical JSON of a match: an object with its keys
// in byte order, no spaces, strings escaped as encoding/json escapes them
// without HTML escaping (json.Encoder.SetEscapeHTML(false)). A nil or
// empty match is "{}". It is an override's identity within its limit, and
// the last tie-breaker of precedence (the lowest wins).
func CanonicalMatch(m map[string]string) string {
	b := []byte{'{'}
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return string(append(b, '}'))
}

func appendString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\'
	}
	if plain { // (what encoding/json writes unchanged)
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // (a string always encodes)
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// wire is an override's JSON, field by field in the order written.
type wire struct {
	Name            string            `json:"name"`
	Match           map[string]string `json:"match"`
	Capacity        int64             `json:"capacity,omitempty"`
	RefillPerSecond float64           `json:"refill_per_second,omitempty"`
	Refill          string            `json:"refill,omitempty"`
	Limit           int64             `json:"limit,omitempty"`
	Window          string            `json:"window,omitempty"`
	MaxInFlight     int64             `json:"max_in_flight,omitempty"`
	Unlimited       bool              `json:"unlimited,omitempty"`
	Deny            bool              `json:"deny,omitempty"`
	Shadow          bool              `json:"shadow,omitempty"`
	BlockFor        string            `json:"block_for,omitempty"`
	TTL             int64             `json:"ttl_s,omitempty"`
	Note            string            `json:"note,omitempty"`
	Source          Source            `json:"source"`
	CreatedAt       *string           `json:"created_at"`
	UpdatedAt       *string           `json:"updated_at"`
	ExpiresAt       *string           `json:"expires_at"`
}

func (o *Override) wire() wire {
	m := o.Match
	if m == nil {
		m = map[string]string{}
	}
	src := o.Source
	if src == "" {
		src = SourceAPI
	}
	return wire{Name: o.Name, Match: m, Capacity: o.Capacity, RefillPerSecond: o.RefillPerSecond, Refill: o.Refill,
		Limit: o.Limit, Window: FormatDuration(o.Window), MaxInFlight: o.MaxInFlight, Unlimited: o.Unlimited,
		Deny: o.Deny, Shadow: o.Shadow, BlockFor: FormatDuration(o.BlockFor), TTL: o.TTL, Note: o.Note, Source: src,
		CreatedAt: timeOrNull(o.CreatedAt), UpdatedAt: timeOrNull(o.UpdatedAt), ExpiresAt: timeOrNull(o.ExpiresAt)}
}

// MarshalJSON writes o as the API shows it, in this order: name, match
// (always an object), the parameters given (capacity, refill_per_second,
// refill, limit, window, max_in_flight; durations as FormatDuration
// writes them), unlimited, deny and shadow when true, block_for, ttl_s and
// note when set, source ("api" when empty), then created_at, updated_at
// and expires_at in TimeFormat, each null when zero (expires_at without a
// TTL).
func (o Override) MarshalJSON() ([]byte, error) { return json.Marshal(o.wire()) }

// Listed is an override as a listing shows it, with what this instance
// has counted of it.
type Listed struct {
	Override
	// MatchedTotal is the number of decisions the override applied to on
	// this instance since it was loaded here (Rule.Hit).
	MatchedTotal uint64
	// LastMatchedAt is the last of them (zero: none).
	LastMatchedAt time.Time
}

// MarshalJSON writes l as Override.MarshalJSON does, followed by
// matched_total and last_matched_at (null when zero).
func (l Listed) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		wire
		MatchedTotal  uint64  `json:"matched_total"`
		LastMatchedAt *string `json:"last_matched_at"`
	}{l.Override.wire(), l.MatchedTotal, timeOrNull(l.LastMatchedAt)})
}

func timeOrNull(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(TimeFormat)
	return &s
}

// FormatDuration writes d as time.Duration.String does without trailing
// zero units ("10m", "1h30m", "24h", "1.5s"); "" for 0. ParseDuration
// reads it back.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ParseDuration reads a duration as the policy file writes them: a Go
// duration ("90s", "1h30m") or whole days ("7d"); it is policy.ParseDuration.
func ParseDuration(s string) (time.Duration, error) { return policy.ParseDuration(s) }

// DecodeRequest decodes the body of a PUT /v1/overrides: one JSON object
// with the fields name, match (required, an object of strings; {} matches
// every request), the parameters, unlimited, deny, shadow, block_for,
// ttl_s, note and source ("api" only). It refuses, with an *Error matching
// ErrBadRequest: malformed JSON, anything after the object, a field that
// is not one of these (names are case-sensitive: "Capacity" is refused,
// with the field meant), a field given twice (in match too), a null, a
// number that is not a whole number where one is due, 0 or a negative
// parameter, a malformed duration or rate, and every problem
// Override.checkFields finds ("*" inside a value, deny with parameters,
// and so on). Times are the server's: created_at, updated_at and
// expires_at are refused.
func DecodeRequest(body []byte) (*Override, error) {
	o := &Override{}
	if err := decodeObject(body, o, requestFields); err != nil {
		return nil, err
	}
	if err := o.checkFields(); err != nil {
		return nil, err
	}
	return o, nil
}

// DecodeKey decodes the body of a DELETE /v1/overrides: exactly the fields
// name and match, both required (errors as DecodeRequest's).
func DecodeKey(body []byte) (name string, match map[string]string, err error) {
	o := &Override{}
	if err := decodeObject(body, o, keyFields); err != nil {
		return "", nil, err
	}
	if o.Name == "" {
		return "", nil, errorf(ErrBadRequest, "", "name", "missing name")
	}
	return o.Name, o.Match, nil
}

// UnmarshalJSON decodes a record as MarshalJSON writes it (a Store's
// copy), as strictly as DecodeRequest, with source "policy" and the times
// accepted (TimeFormat or any RFC 3339 time, or null).
func (o *Override) UnmarshalJSON(b []byte) error {
	var x Override
	if decodeCompact(b, &x, recordFields) && x.checkFields() == nil {
		*o = x
		return nil
	}
	x = Override{}
	if err := decodeObject(b, &x, recordFields); err != nil {
		return err
	}
	if err := x.checkFields(); err != nil {
		return err
	}
	*o = x
	return nil
}

// field decodes one field's JSON value into o.
type field func(o *Override, raw []byte) error

var keyFields = map[string]field{
	"name":  func(o *Override, raw []byte) error { return decodeStr(raw, &o.Name) },
	"match": decodeMatch,
}

var requestFields = map[string]field{
	"name":              keyFields["name"],
	"match":             keyFields["match"],
	"capacity":          func(o *Override, raw []byte) error { return decodePositive(raw, &o.Capacity) },
	"refill_per_second": decodeRate,
	"refill":            func(o *Override, raw []byte) error { return decodeStr(raw, &o.Refill) },
	"limit":             func(o *Override, raw []byte) error { return decodePositive(raw, &o.Limit) },
	"window":            func(o *Override, raw []byte) error { return decodeDuration(raw, &o.Window) },
	"max_in_flight":     func(o *Override, raw []byte) error { return decodePositive(raw, &o.MaxInFlight) },
	"unlimited":         func(o *Override, raw []byte) error { return decodeBool(raw, &o.Unlimited) },
	"deny":              func(o *Override, raw []byte) error { return decodeBool(raw, &o.Deny) },
	"shadow":            func(o *Override, raw []byte) error { return decodeBool(raw, &o.Shadow) },
	"block_for":         func(o *Override, raw []byte) error { return decodeDuration(raw, &o.BlockFor) },
	"ttl_s":             func(o *Override, raw []byte) error { return decodePositive(raw, &o.TTL) },
	"note":              func(o *Override, raw []byte) error { return decodeStr(raw, &o.Note) },
	"source": func(o *Override, raw []byte) error {
		var s string
		if err := decodeStr(raw, &s); err != nil {
			return err
		}
		if s != string(SourceAPI) {
			return errors.New(`source must be "api" (the policy file sets "policy")`)
		}
		o.Source = SourceAPI
		return nil
	},
	"created_at": serverTime, "updated_at": serverTime, "expires_at": serverTime,
}

var recordFields = withFields(requestFields, map[string]field{
	"source": func(o *Override, raw []byte) error {
		var s string
		err := decodeStr(raw, &s)
		o.Source = Source(s)
		return err
	},
	"created_at": func(o *Override, raw []byte) error { return decodeTime(raw, &o.CreatedAt) },
	"updated_at": func(o *Override, raw []byte) error { return decodeTime(raw, &o.UpdatedAt) },
	"expires_at": func(o *Override, raw []byte) error { return decodeTime(raw, &o.ExpiresAt) },
})

// withFields is base with more added (replacing base's of the same name).
func withFields(base, more map[string]field) map[string]field {
	m := make(map[string]field, len(base)+len(more))
	for k, f := range base {
		m[k] = f
	}
	for k, f := range more {
		m[k] = f
	}
	return m
}

func serverTime(*Override, []byte) error {
	return errors.New("is set by the server: leave it out (ttl_s sets the expiry)")
}

// decodeObject decodes one JSON object into o through fields, refusing
// what DecodeRequest refuses. Keys compare as the decoder reads them
// ("n\u0061me" is "name").
func decodeObject(body []byte, o *Override, fields map[string]field) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	bad := func(field, format string, args ...any) error {
		return errorf(ErrBadRequest, o.Name, field, format, args...)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return bad("", "the body must be one JSON object")
	}
	var seen seenFields
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return bad("", "malformed JSON: %v", err)
		}
		key := t.(string) // (an object's keys are strings)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return bad(key, "malformed JSON: %v", err)
		}
		if err := member(o, fields, &seen, key, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return bad("", "malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("", "the body must be one JSON object, with nothing after it")
	}
	return missing(o, fields, &seen)
}

// member decodes the object's member key: raw into o by its field.
func member(o *Override, fields map[string]field, seen *seenFields, key string, raw []byte) error {
	bad := func(field, format string, args ...any) error {
		return errorf(ErrBadRequest, o.Name, field, format, args...)
	}
	f, ok := fields[key]
	switch {
	case !ok:
		return bad("", "%s", unknown(key, fields))
	case seen.has(key):
		return bad(key, "given twice")
	case string(raw) == "null" && key != "expires_at":
		return bad(key, "must not be null (leave it out)")
	}
	seen.add(key)
	if err := f(o, raw); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return e
		}
		return bad(key, "%v", err)
	}
	return nil
}

// missing reports a required field that the object lacks.
func missing(o *Override, fields map[string]field, seen *seenFields) error {
	if fields["match"] != nil && !seen.has("match") {
		return errorf(ErrBadRequest, o.Name, "match", "missing match (an object of descriptor: value; {} matches every request)")
	}
	return nil
}

// seenFields are the fields of an object decoded so far (a few: every
// field is known and given once, or the object is refused).
type seenFields struct{ names []string }

func (s *seenFields) has(key string) bool {
	for _, n := range s.names {
		if n == key {
			return true
		}
	}
	return false
}

func (s *seenFields) add(key string) { s.names = append(s.names, key) }

// unknown says that key is no field, naming the one it matches in another
// case.
func unknown(key string, fields map[string]field) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf("unknown field %q (field names are case-sensitive: did you mean %q?)", key, name)
		}
	}
	return fmt.Sprintf("unknown field %q", key)
}

func decodeMatch(o *Override, raw []byte) error {
	if m, ok := splitMatch(raw); ok {
		o.Match = m
		return nil
	}
	return decodeMatchJSON(o, raw)
}

// decodeMatchJSON is decodeMatch through encoding/json, for any input.
func decodeMatchJSON(o *Override, raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("must be an object of descriptor: value")
	}
	m := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		k := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		if _, dup := m[k]; dup {
			return fmt.Errorf("key %q is given twice", k)
		}
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return fmt.Errorf("value of %q must be a string", k)
		}
		m[k] = s
	}
	o.Match = m
	return nil
}

func decodeStr(raw []byte, s *string) error {
	if len(raw) == 0 || raw[0] != '"' {
		return fmt.Errorf("%s is not a string", raw)
	}
	if plainString(raw) {
		*s = string(raw[1 : len(raw)-1])
		return nil
	}
	return json.Unmarshal(raw, s)
}

func decodeBool(raw []byte, b *bool) error {
	switch string(raw) {
	case "true":
		*b = true
	case "false":
		*b = false
	default:
		return fmt.Errorf("%s is not true or false", raw)
	}
	return nil
}

// decodePositive decodes a whole number of at least 1.
func decodePositive(raw []byte, x *int64) error {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not a whole number", raw)
	}
	if n < 1 {
		return fmt.Errorf("%d must be at least 1", n)
	}
	*x = n
	return nil
}

func decodeRate(o *Override, raw []byte) error {
	if len(raw) == 0 || raw[0] == '"' || raw[0] == 't' || raw[0] == 'f' || raw[0] == '[' || raw[0] == '{' {
		return fmt.Errorf("%s is not a number", raw)
	}
	r, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", raw)
	}
	if !(r > 0) {
		return fmt.Errorf("rate %v must be positive", r)
	}
	o.RefillPerSecond = r
	return nil
}

func decodeDuration(raw []byte, d *time.Duration) error {
	var s string
	if err := decodeStr(raw, &s); err != nil {
		return fmt.Errorf("%s is not a duration (a string like \"10m\", \"24h\", \"7d\")", raw)
	}
	x, err := ParseDuration(s)
	if err != nil {
		return err
	}
	if x <= 0 {
		return fmt.Errorf("%q must be positive", s)
	}
	*d = x
	return nil
}

func decodeTime(raw []byte, t *time.Time) error {
	if string(raw) == "null" {
		*t = time.Time{}
		return nil
	}
	var s string
	if err := decodeStr(raw, &s); err != nil {
		return err
	}
	x, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("%q is not an RFC 3339 time", s)
	}
	*t = x.UTC()
	return nil
}
