// Errors a call through a gate may return to it: server retry hints (WithRetryAfter) and retryable errors.

package gate

import (
	"errors"
	"time"
)

// RetryAfterer is implemented by errors that carry a server's retry hint:
// how long the protected service asked callers to stay away.
type RetryAfterer interface {
	RetryAfter() time.Duration
}

type hintError struct {
	err  error
	hint time.Duration
}

func (e *hintError) Error() string             { return e.err.Error() + " (retry after " + e.hint.String() + ")" }
func (e *hintError) Unwrap() error             { return e.err }
func (e *hintError) RetryAfter() time.Duration { return e.hint }

// WithRetryAfter wraps err with a server retry hint d: when a call through
// a gate returns it, the whole gate pauses for d and the call is retried
// (within the gate's Retry policy) no sooner than d. A nil err gives an
// error that says only the hint; a negative d counts as 0.
func WithRetryAfter(err error, d time.Duration) error {
	if err == nil {
		err = errors.New("gate: server asked to retry later")
	}
	return &hintError{err: err, hint: max(d, 0)}
}

// RetryAfterOf returns the retry hint that err (or an error it wraps)
// carries, found with errors.As, and whether there is one.
func RetryAfterOf(err error) (time.Duration, bool) {
	var h RetryAfterer
	if errors.As(err, &h) {
		return max(h.RetryAfter(), 0), true
	}
	return 0, false
}

type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Retryable marks err as worth retrying (a transient failure without a
// server hint). Nil stays nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err}
}

// IsRetryable reports whether err is marked Retryable or carries a retry
// hint.
func IsRetryable(err error) bool {
	var r *retryableError
	if errors.As(err, &r) {
		return true
	}
	_, ok := RetryAfterOf(err)
	return ok
}
