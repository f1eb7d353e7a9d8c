// Package policy loads sluice's policy file: the keyed, scoped limits a
// request is subject to, the cost of each request class
// (docs/behaviour.md section 4) and the descriptors whose values logs must
// not show. The format is YAML:
//
//	limits:
//	  - name: global                 # unique; used in responses, logs and metrics
//	    key: "global"                # bucket key template; {x} is the request's descriptor x
//	    capacity: 1000               # token bucket B
//	    refill_per_second: 500       # token bucket r (or refill: "100/m", "1/h", "5/s", "2/d")
//	  - name: tenant_export
//	    key: "tenant:{tenant}:route:{route}"
//	    when: {route: "/export"}     # applies only when these descriptors match exactly
//	    hash_tag: "{tenant}"         # optional: one Redis Cluster slot per tenant
//	    capacity: 60
//	    refill_per_second: 1
//	    shadow: true                 # optional: evaluated and counted, never refuses (a dry run; not for max_in_flight)
//	    new_key_gate: global         # optional: a new key of this limit only for requests that limit admits
//	  - name: user_daily
//	    key: "user:{user}"
//	    algorithm: sliding_window    # token_bucket (default) | sliding_window | fixed_window
//	    limit: 10000
//	    window: 24h
//	  - name: tool_calls
//	    key: "api_key:{api_key}"
//	    max_in_flight: 5             # concurrency limit (held until released or its slot expires)
//	    lease_ttl: 30s
//	    on_store_error: fail_closed  # optional: fail_open | fail_closed | local; default the server's
//	costs:                           # optional cost per request class; a request's own cost wins
//	  - when: {route: "/export"}
//	    cost: 20
//	redact: [api_key, user]          # optional: these values show only as a hash in logs and key listings
//	allow_unmatched: false           # optional: true admits a /v1/check no limit applies to (default: 422 no_limit_applies)
//
// A limit with max_in_flight is a concurrency limit (algorithm may be
// omitted or be "concurrency"). A limit applies to a request when every
// {placeholder} of its key is among the request's descriptors and its when
// matches. Parse reports every problem of a file, each with its line, its
// column (except for YAML syntax errors) and, where they apply, the limit
// and the field; a misspelt field gets the nearest known one suggested.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/yamlmsg"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/store"
)

// Kind is what a limit counts: the one kind type, store.Kind.
type Kind = store.Kind

// The kinds of limit (store's constants).
const (
	// TokenBucket is a token bucket (capacity, refill).
	TokenBucket = store.TokenBucket
	// SlidingWindow is a sliding-window counter (limit per window).
	SlidingWindow = store.SlidingWindow
	// FixedWindow is a fixed-window counter (limit per window, reset at each
	// boundary): kept as a baseline, it admits up to twice its limit across
	// a boundary.
	FixedWindow = store.FixedWindow
	// Concurrency caps requests held at once (max_in_flight, lease_ttl).
	Concurrency = store.Concurrency
	// Quota is a calendar quota (limit per day, week, month or year in a
	// time zone).
	Quota = store.Quota
)

// The values of on_store_error (Limit.OnStoreError), store's modes.
const (
	// FailOpen admits requests while the store is unreachable.
	FailOpen = store.FailOpen
	// FailClosed refuses them.
	FailClosed = store.FailClosed
	// Local decides them in process, each instance with its share.
	Local = store.Local
)

// Limit is one limit of a policy.
type Limit struct {
	Name string
	Key  string            // the key template, e.g. "tenant:{tenant}"
	When map[string]string // descriptors that must match exactly

	// Limit is the limit's kind and the fields of that kind (Kind, Bucket,
	// Window, MaxInFlight, SlotTTL, Quota), with what its kind makes of
	// them: Capacity, Shape (the terms shown: rate, window, period, span),
	// LogAttrs, As (store's kind table).
	store.Limit

	// HashTag is a template like Key ("{tenant}") whose rendering becomes
	// the Redis Cluster hash tag of the limit's keys: limits whose tags
	// render alike keep their keys in one hash slot, so a request needing
	// them is decided by one atomic script. Empty: the key is its own slot.
	// Its placeholders must be among the key's.
	HashTag string

	// OnStoreError overrides the server's choice when the store fails
	// (FailOpen, FailClosed, Local); empty means the server's.
	OnStoreError string

	// Shadow evaluates and counts the limit as if it were enforced, but it
	// never refuses a request (limiter: its would-be refusal is reported
	// as ShadowRefused; it takes tokens only when it would have admitted,
	// and no other limit's all-or-nothing decision depends on it).
	Shadow bool

	// NewKeyGate (new_key_gate) names the limit a request must pass before
	// this limit creates a key for it: a tenant's or an IP's limit in front
	// of per-user keys. The gate applies to every request this limit
	// applies to (Parse checks it), and a store creates keys only for
	// requests every limit admits, so this limit's keys are created no
	// faster than the gate admits (a flood the gate refuses creates none,
	// and evicts none at a store's key cap). Empty: no gate.
	NewKeyGate string

	// Unit is what the limit counts (unit): "" (requests, each request's
	// cost), UnitTokens, UnitInputTokens, UnitOutputTokens or UnitUSD
	// (micro-dollars at the policy's Prices). See CountsUsage.
	Unit string

	// Adaptive (adaptive), for a token bucket, makes its refill a ceiling
	// that learns from feedback (policy/adaptive.go); nil: a fixed refill.
	Adaptive *Adaptive

	// Alerts are the fractions of the capacity (used in the current
	// period or bucket) whose crossing fires an alert (alerts), in
	// increasing order; nil: none.
	Alerts []float64

	// EnvoySettle (envoy_settle) makes the limit reserve-then-settle
	// through Envoy's RateLimitService (policy/envoysettle.go); nil: not.
	EnvoySettle *EnvoySettle

	// FairShare (fair_share), for a token bucket, divides its refill
	// between tenants while it is contended (policy/fairshare.go); nil:
	// none. Its store part is Limit.Limit.FairShare.
	FairShare *FairShare

	// Line is where the limit starts in the file.
	Line int

	params []keyPart
	placeh []string
	tag    []keyPart
	gate   gatePos
}

// StoreLimit is l's kind and the fields of that kind, as store.NewSpec
// compiles them. A shadow limit's has no BlockFor: a shadow refusal blocks
// no key (it refuses nothing).
func (l *Limit) StoreLimit() store.Limit {
	sl := l.Limit
	if l.Shadow {
		sl.BlockFor = 0
	}
	return sl
}

// Placeholders returns the descriptor names the key template uses.
func (l *Limit) Placeholders() []string { return l.placeh }

type keyPart struct {
	lit  string
	name string // placeholder when set
}

// CostRule gives the cost of requests whose descriptors match When.
type CostRule struct {
	When map[string]string
	Cost int64
	Line int // where the rule starts in the file

	costLine, costColumn int // where its cost is
}

// Policy is a loaded, validated policy. It is immutable.
type Policy struct {
	Limits []*Limit
	Costs  []CostRule
	// Redact lists, in file order and without repeats, the descriptors
	// whose values are shown only as a short hash in logs and key listings
	// (see DisplayKey). Keys in the store are not affected.
	Redact []string
	// Request says how descriptors are read from an HTTP request
	// (request_descriptors; forward-auth's /v1/auth), in file order.
	Request []RequestDescriptor
	// AllowUnmatched (allow_unmatched: true) admits a /v1/check whose
	// descriptors no limit applies to, as 200 with no limits; false (the
	// default) answers it 422 no_limit_applies, so that a misspelt
	// descriptor is not admitted unlimited. Forward-auth and the Envoy
	// mode admit such requests whatever it says.
	AllowUnmatched bool
	// Prices are the prices of model calls (prices, default_price) that
	// limits with unit usd count; nil when the file has neither.
	Prices *Prices
	// Priorities are the policy's priority classes (priorities), highest
	// first; DefaultPriority the class of a request that names none
	// (default_priority; empty: the zero Priority, today's behaviour).
	// See Policy.Priority.
	Priorities      []Priority
	DefaultPriority string
	// Version is a hash of the file's content (sha256, first 16 hex digits).
	Version string
	// Source is the file's text.
	Source []byte
}

// Error is a validation error with its position.
type Error struct {
	Line, Column int
	Limit        string // the limit's name, when known
	Field        string
	Msg          string
}

// Error formats e as `line L, column C: limit "x": field "f": msg`, leaving
// out the column, limit and field when they are not known.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d", e.Line)
	if e.Column > 0 {
		fmt.Fprintf(&b, ", column %d", e.Column)
	}
	if e.Limit != "" {
		fmt.Fprintf(&b, ": limit %q", e.Limit)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	return b.String() + ": " + e.Msg
}

// Errors is every validation error of a file, in file order (by line,
// then column). A problem that does not follow from another is reported
// even when the other is.
type Errors []*Error

// Error is one problem a line: "policy: " and the problem when there is
// one, else a line "policy: N problems:" followed by each problem on its
// own line, indented by two spaces.
func (es Errors) Error() string {
	if len(es) == 1 {
		return "policy: " + es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "policy: %d problems:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// ErrInvalid is matched (errors.Is) by every error Load and Parse return.
var ErrInvalid = errors.New("invalid policy")

// Is reports whether target is ErrInvalid.
func (es Errors) Is(target error) bool { return target == ErrInvalid }

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Parse(b)
}

// MaxFileSize bounds a policy file (1 MiB).
const MaxFileSize = 1 << 20

// Parse parses and validates a policy. On error it returns Errors, which
// lists every problem with its line (and matches ErrInvalid).
func Parse(src []byte) (*Policy, error) {
	if len(src) > MaxFileSize {
		return nil, Errors{{Line: 1, Msg: fmt.Sprintf("file of %d bytes exceeds the maximum %d", len(src), MaxFileSize)}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, Errors{yamlError(err)}
	}
	p := &Policy{Source: append([]byte(nil), src...)}
	sum := sha256.Sum256(src)
	p.Version = hex.EncodeToString(sum[:8])
	v := &validator{names: map[string]int{}}
	if len(doc.Content) == 0 {
		v.add(&Error{Line: 1, Column: 1, Msg: "empty policy: it needs a limits list"})
		return nil, v.errs
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		v.at(root, "", "", "the policy must be a mapping with a limits list")
		return nil, v.errs
	}
	v.policy(root, p)
	if len(v.errs) > 0 {
		return nil, v.sorted()
	}
	return p, nil
}

// alwaysHits reports whether every request matching when is subject to l:
// l's own when is implied and its key needs no descriptor beyond when's.
// (Other requests are checked at decision time: the limiter refuses a cost
// above an applicable capacity with a CostError.)
func alwaysHits(when map[string]string, l *Limit) bool {
	for k, v := range l.When {
		if when[k] != v {
			return false
		}
		if _, ok := when[k]; !ok {
			return false
		}
	}
	for _, name := range l.placeh {
		if _, ok := when[name]; !ok {
			return false
		}
	}
	return true
}

func yamlError(err error) *Error {
	line, msg := yamlmsg.Split(err)
	return &Error{Line: line, Msg: msg}
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// parseKey splits a key template into literals and placeholders.
func parseKey(t string) ([]keyPart, []string, error) {
	var parts []keyPart
	var names []string
	for t != "" {
		i := strings.IndexAny(t, "{}")
		if i < 0 {
			parts = append(parts, keyPart{lit: t})
			break
		}
		if t[i] == '}' {
			return nil, nil, fmt.Errorf("unbalanced } in key template")
		}
		if i > 0 {
			parts = append(parts, keyPart{lit: t[:i]})
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 0 {
			return nil, nil, fmt.Errorf("unclosed { in key template")
		}
		name := t[i+1 : i+j]
		if !validName(name) {
			return nil, nil, fmt.Errorf("placeholder {%s} must be a descriptor name (letters, digits, _ - .)", name)
		}
		parts = append(parts, keyPart{name: name})
		names = append(names, name)
		t = t[i+j+1:]
	}
	return parts, names, nil
}

// Match reports whether l applies to a request with these descriptors and,
// if so, returns its bucket key: the template with each placeholder
// replaced by the descriptor's value, with "%", ":", "{" and "}" written
// as "%25", "%3A", "%7B" and "%7D" (so that distinct descriptor sets never
// share a key, and a value cannot change the key's hash tag).
func (l *Limit) Match(desc map[string]string) (string, bool) {
	b, ok := l.AppendKey(nil, desc)
	return string(b), ok
}

// AppendKey is Match appending the key to dst (no allocation when dst has
// room); on false dst is returned unchanged.
func (l *Limit) AppendKey(dst []byte, desc map[string]string) ([]byte, bool) {
	return l.appendKey(dst, desc, nil)
}

// appendKey is AppendKey, with the values of the descriptors that redact
// redacts (when it is not nil) rendered by appendRedacted.
func (l *Limit) appendKey(dst []byte, desc map[string]string, redact *Policy) ([]byte, bool) {
	if !matches(l.When, desc) {
		return dst, false
	}
	n := len(dst)
	for _, p := range l.params {
		if p.name == "" {
			dst = append(dst, p.lit...)
			continue
		}
		val, ok := desc[p.name]
		if !ok {
			return dst[:n], false
		}
		if redact != nil && redact.Redacts(p.name) {
			dst = appendRedacted(dst, val)
		} else {
			dst = appendEscaped(dst, val)
		}
	}
	return dst, true
}

// AppendHashTag appends the limit's rendered hash tag, in braces, to dst
// ("{acme}"); nothing when the limit has no hash_tag. It must be called
// only for descriptors that AppendKey matched.
func (l *Limit) AppendHashTag(dst []byte, desc map[string]string) []byte {
	if len(l.tag) == 0 {
		return dst
	}
	dst = append(dst, '{')
	for _, p := range l.tag {
		if p.name == "" {
			dst = append(dst, p.lit...)
		} else {
			dst = appendEscaped(dst, desc[p.name])
		}
	}
	return append(dst, '}')
}

// appendEscaped appends s with "%", ":" and the braces escaped (braces
// would change a key's Redis Cluster hash slot).
func appendEscaped(b []byte, s string) []byte { return keyEsc.Append(b, s) }

var keyEsc = keyesc.NewSet(keyesc.PolicyKey)

// Cost returns the cost of a request with these descriptors: the first
// matching cost rule's, else 1.
func (p *Policy) Cost(desc map[string]string) int64 {
	for _, c := range p.Costs {
		if matches(c.When, desc) {
			return c.Cost
		}
	}
	return 1
}

func matches(when, desc map[string]string) bool {
	if len(when) == 0 {
		return true
	}
	for k, want := range when {
		got, ok := desc[k]
		if !ok || got != want {
			return false
		}
	}
	return true
}

// Limit returns the limit named name, or nil.
func (p *Policy) Limit(name string) *Limit {
	for _, l := range p.Limits {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// ParseRate parses a refill rate written as "N/unit": unit s (or sec,
// second), m (min, minute), h (hour), d (day); N may be fractional.
func ParseRate(s string) (float64, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("refill %q must look like 100/m", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("refill %q: %q is not a number", s, num)
	}
	if n <= 0 {
		return 0, fmt.Errorf("refill %q must be positive", s)
	}
	var per float64
	switch strings.TrimSpace(unit) {
	case "s", "sec", "second":
		per = 1
	case "m", "min", "minute":
		per = 60
	case "h", "hour":
		per = 3600
	case "d", "day":
		per = 86400
	default:
		return 0, fmt.Errorf("refill %q: unknown unit %q (want s, m, h or d)", s, unit)
	}
	return n / per, nil
}

// ParseDuration reads a duration as the policy file writes them: a Go
// duration ("90s", "1h30m") or whole days ("7d", at most 100,000). A
// negative Go duration is returned as it is: callers range-check.
func ParseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n < 0 || n > 100_000 {
			return 0, fmt.Errorf("%q is not a duration", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 30s, 24h, 7d)", s)
	}
	return d, nil
}
