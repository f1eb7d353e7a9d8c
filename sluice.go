// Package sluice holds the vocabulary shared by every sluice package: the
// Decision a limiter returns, the Clock it reads, and the errors every layer
// reports. It has no dependencies beyond the standard library.
//
// The algorithms live in sub-packages: bucket (an exact token bucket), window
// (sliding- and fixed-window counters). Later layers (gate, limiter, stores,
// server) build on them and report the same Decision and errors.
package sluice

import (
	"errors"
	"fmt"
	"time"
)

// Clock is the only time source the algorithms read. Now must return readings
// that are comparable with each other (time.Time.Sub is used on them). The
// algorithms treat a reading earlier than one already seen as equal to the
// latest one seen, so a clock that steps backwards neither adds nor removes
// credit.
type Clock interface {
	Now() time.Time
}

// SystemClock is the default Clock: time.Now, whose readings carry the
// monotonic clock, so a wall-clock jump changes no decision.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Decision is the outcome of one admission check. It has exactly four
// fields so that the compiler keeps it in registers (a struct of five or
// more fields is returned through memory, which cost a third of a decision).
//
// For a token bucket, Remaining is the whole number of tokens left after the
// decision (rounded down, and 0 while the bucket is in debt to reservations);
// for a window counter it is the whole remaining allowance of the window.
type Decision struct {
	// Allowed reports whether the request was admitted (and its cost taken).
	Allowed bool
	// Remaining is the whole number of tokens (or window allowance) left after
	// the decision, rounded down; never negative.
	Remaining int64
	// RetryAfter is 0 when Allowed. When denied it is the exact earliest wait,
	// rounded up to the nanosecond, after which the same cost is admitted if
	// nothing else is taken meanwhile: a caller that waits exactly RetryAfter
	// is admitted, one that waits a nanosecond less is not.
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is back to its full, idle
	// state (a full bucket, an empty window) if nothing more is taken.
	ResetAfter time.Duration
}

// Sentinel errors. Every sluice layer returns errors that match one of these
// with errors.Is; the error's message carries the numbers involved.
var (
	// ErrInvalidLimit reports a limit that cannot be represented or makes no
	// sense: capacity < 1, rate <= 0, NaN or infinite, window <= 0, and so on.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrInvalidCost reports a negative cost (or one otherwise unusable).
	ErrInvalidCost = errors.New("invalid cost")
	// ErrCostExceedsCapacity reports a cost larger than the limiter's capacity:
	// such a request can never be admitted, so waiting is useless.
	ErrCostExceedsCapacity = errors.New("cost exceeds capacity")
	// ErrWaitTooLong reports that admission would come later than the caller
	// is willing to wait (its maximum wait or its context deadline). Nothing
	// was consumed.
	ErrWaitTooLong = errors.New("wait too long")
	// ErrQueueFull reports that no waiting room was left: the caller was
	// refused at once. Nothing was consumed.
	ErrQueueFull = errors.New("queue full")
)

// Error is an error with a precise message that matches a sentinel (Kind)
// with errors.Is. Every layer builds its errors with Errorf so that callers
// can test the kind and users can read the numbers.
type Error struct {
	Kind error  // one of the sentinel errors above
	Msg  string // the full message, e.g. "cost 11 exceeds capacity 10"
}

// Error returns the message, prefixed with "sluice: ".
func (e *Error) Error() string { return "sluice: " + e.Msg }

// Unwrap returns the sentinel, so errors.Is(err, ErrX) works.
func (e *Error) Unwrap() error { return e.Kind }

// Errorf returns an *Error of the given kind with a formatted message.
func Errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
