// Package overrides holds limits as data: per-descriptor changes of a
// policy limit's parameters (or a deny, or no limit at all), set at run
// time through an API or listed in the policy file, shared by every
// instance through a Store, and resolved on the decision path by a Set.
//
// An Override names a policy limit (Name) and the requests it applies to
// (Match: descriptor → value). A value is exact ("acme"), a prefix
// ("premium_*": any value starting with "premium_", that one included), or
// "*" (any value; the descriptor must be present). A "*" anywhere else in
// a value is an error. The other fields are the limit kind's own
// parameters, each optional (zero: the policy's value), or Unlimited, or
// Deny.
//
// # Precedence
//
// When several overrides of one limit match a request, the most specific
// wins, compared in this order:
//
//  1. more exact values;
//  2. then more prefix values ("*" is neither exact nor a prefix);
//  3. then the longer prefix: the sum, over the prefix values, of the
//     length in bytes of the prefix (the value without its "*");
//  4. then the lowest canonical JSON of Match (CanonicalMatch: keys in
//     byte order, compared byte by byte).
//
// Two overrides of one limit never have the same canonical match (it is
// their identity), so the order is total: the same overrides and request
// always give the same winner, on every instance. An override whose
// ExpiresAt has passed is absent (the next one in this order applies).
//
// # Pieces
//
// Validate checks an Override against a policy; Set indexes the valid ones
// for Resolve, which the limiter calls on every decision; Store shares the
// API's overrides between instances (NewMemStore in process, with an
// optional state file; store/redisstore on Redis), and overridetest is the
// conformance suite of Store implementations. FromPolicy reads the
// policy file's own overrides (Source "policy").
//
// # In a service
//
// At start and on every policy load: FromPolicy(p, now), then
// Set.SetPolicy(p, those) (NewSet(p) the first time); a limiter keeps
// Set.Index(name) per policy limit (an Index stays the same for the Set's
// life). On each decision, for each applicable limit: if ix.Len() > 0,
// r := ix.Resolve(descriptors, now); a non-nil r replaces the limit's
// spec by r.Spec() (or denies, or admits without a store write), and
// r.Hit(now) counts it. The API calls DecodeRequest and PutShared,
// DecodeKey and DeleteShared, Set.List, Set.Resolve and Set.Counts. About
// once a second each instance calls Sync(ctx, set, store) (from one
// goroutine), then Set.Sweep(now).
package overrides

import (
	"errors"
	"fmt"
	"time"
)

// Source says where an override comes from.
type Source string

const (
	// SourceAPI is an override set through the API (PUT /v1/overrides),
	// kept in a Store.
	SourceAPI Source = "api"
	// SourcePolicy is an override listed in the policy file: the API
	// cannot change or delete it (ErrPolicyOverride); a reload replaces
	// it.
	SourcePolicy Source = "policy"
)

// Params are an override's changes to its limit. Every field is optional:
// its zero value means "the policy's". A field applies only to the kinds
// that have it (Validate reports ErrKindMismatch otherwise):
//
//	token_bucket                 Capacity, RefillPerSecond or Refill
//	sliding_window, fixed_window Limit, Window
//	quota                        Limit
//	concurrency                  MaxInFlight
//
// Unlimited and Deny replace the parameters (neither may be given with any
// of them, nor with each other, nor with BlockFor). Params is comparable:
// equal Params compile to one shared rule.
type Params struct {
	Capacity        int64         // capacity: tokens, at least 1
	RefillPerSecond float64       // refill_per_second: > 0
	Refill          string        // refill: "100/m" (policy.ParseRate); not with RefillPerSecond
	Limit           int64         // limit: a window's or a quota's count, at least 1
	Window          time.Duration // window: > 0
	MaxInFlight     int64         // max_in_flight: at least 1

	// Unlimited admits every request it applies to at once, without a
	// store write (its decisions are still counted).
	Unlimited bool
	// Deny refuses every request it applies to.
	Deny bool
	// Shadow makes the override count as if enforced but never refuse
	// (as policy.Limit.Shadow). Not for concurrency limits. False leaves
	// the policy limit's own shadow setting.
	Shadow bool
	// BlockFor (block_for), when positive, keeps a key refused by the
	// limit refused for this long from the refusal (the penalty box);
	// zero: the policy limit's.
	BlockFor time.Duration
}

// Override is one override: the identity (Name, Match), its parameters,
// and its record.
type Override struct {
	// Name is the policy limit the override changes.
	Name string
	// Match maps descriptor names of the limit's key template or its when
	// to a value: exact, "prefix*" or "*". Empty matches every request
	// the limit applies to.
	Match map[string]string
	Params
	// TTL (ttl_s), when positive, is the override's lifetime in seconds
	// from UpdatedAt: ExpiresAt is UpdatedAt + TTL.
	TTL int64
	// Note is free text for people (at most MaxNote bytes).
	Note string
	// Source is where the override comes from; empty reads as SourceAPI.
	Source Source
	// CreatedAt is when the (Name, Match) pair was first set; UpdatedAt
	// when it was last set; ExpiresAt is zero without a TTL. All are
	// kept at millisecond precision, in UTC.
	CreatedAt, UpdatedAt, ExpiresAt time.Time
}

// Limits of an override's free-form fields.
const (
	// MaxNote bounds Note, in bytes.
	MaxNote = 1024
	// MaxMatch bounds the number of entries of Match.
	MaxMatch = 16
	// MaxValue bounds a Match value, in bytes.
	MaxValue = 1024
	// MaxTTL bounds TTL: 100 years, in seconds.
	MaxTTL = 100 * 365 * 86400
	// DefaultMax is the default cap on the overrides a Store holds
	// (--max-overrides).
	DefaultMax = 1_000_000
)

// Expired reports whether o has an expiry and it is at or before now.
func (o *Override) Expired(now time.Time) bool {
	return !o.ExpiresAt.IsZero() && !now.Before(o.ExpiresAt)
}

// Stamp sets o's times for a set at now: UpdatedAt is now, CreatedAt is
// created when it is not zero (the time the pair was first set) else now,
// and ExpiresAt is now + TTL seconds (zero without a TTL); all truncated
// to milliseconds, in UTC.
func (o *Override) Stamp(now, created time.Time) {
	now = now.UTC().Truncate(time.Millisecond)
	o.UpdatedAt, o.CreatedAt, o.ExpiresAt = now, now, time.Time{}
	if !created.IsZero() {
		o.CreatedAt = created.UTC().Truncate(time.Millisecond)
	}
	if o.TTL > 0 {
		o.ExpiresAt = now.Add(time.Duration(o.TTL) * time.Second)
	}
}

// Key identifies an override: its limit and its canonical match
// (CanonicalMatch).
type Key struct {
	Name  string
	Match string
}

// KeyOf returns the key of the override of limit name with match m.
func KeyOf(name string, m map[string]string) Key { return Key{name, CanonicalMatch(m)} }

// Key returns o's key.
func (o *Override) Key() Key { return KeyOf(o.Name, o.Match) }

// Sentinel errors. Every error of this package about an override matches
// one of them (errors.Is); the service answers them as
//
//	ErrUnknownLimit      404 unknown_limit
//	ErrNotFound          404 not_found
//	ErrKindMismatch      422 kind_mismatch
//	ErrUnknownDescriptor 422 unknown_descriptor
//	ErrTooMany           422 too_many_overrides
//	ErrBadRequest        400 bad_request
//	ErrPolicyOverride    409 policy_override
var (
	// ErrUnknownLimit: the override's Name is no limit of the policy.
	ErrUnknownLimit = errors.New("unknown limit")
	// ErrKindMismatch: a parameter the limit's kind does not have.
	ErrKindMismatch = errors.New("parameter of another kind of limit")
	// ErrUnknownDescriptor: a Match name the limit uses neither in its key
	// template nor in its when.
	ErrUnknownDescriptor = errors.New("unknown descriptor")
	// ErrBadRequest: malformed JSON or YAML, an unknown field, a bad
	// number, duration or value, or parameters that do not go together.
	ErrBadRequest = errors.New("bad override")
	// ErrTooMany: a Store holds its maximum number of overrides and the
	// Put would add one.
	ErrTooMany = errors.New("too many overrides")
	// ErrPolicyOverride: the API tried to change or delete an override
	// the policy file sets.
	ErrPolicyOverride = errors.New("override set by the policy file")
	// ErrNotFound: no override of that name and match.
	ErrNotFound = errors.New("no such override")
)

// Error is an error about one override: Err is the sentinel it matches,
// Field the field at fault (empty when none), Msg what is wrong.
type Error struct {
	Err   error
	Limit string
	Field string
	Msg   string
}

// Error reads `override of limit "x": field "f": msg`, leaving out what is
// not known.
func (e *Error) Error() string {
	s := "override"
	if e.Limit != "" {
		s += fmt.Sprintf(" of limit %q", e.Limit)
	}
	if e.Field != "" {
		s += fmt.Sprintf(": field %q", e.Field)
	}
	return s + ": " + e.Msg
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

func errorf(sentinel error, limit, field, format string, args ...any) *Error {
	return &Error{Err: sentinel, Limit: limit, Field: field, Msg: fmt.Sprintf(format, args...)}
}
