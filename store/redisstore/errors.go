// Errors: what a failed Redis call means (unreachable, or reachable and
// refusing, by class), counted per class, and the configuration errors
// Open reports.

package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

// Classes of the errors of Redis calls (Error.Class). Every class but
// ClassUnreachable means Redis was reached and refused the call.
const (
	// ClassUnreachable: no answer — a connection refused, reset or lost, a
	// timeout (the store's or the caller's), or an answer that Redis
	// cannot serve now and will soon without anyone acting: LOADING,
	// BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, "max number of clients".
	ClassUnreachable = "unreachable"
	// ClassOOM: OOM — Redis is at maxmemory under maxmemory-policy
	// noeviction and refuses commands that may grow memory, or a call
	// that would create a key was refused while it is (an error matching
	// store.ErrFull).
	ClassOOM = "oom"
	// ClassReadonly: READONLY — the node is a replica.
	ClassReadonly = "readonly"
	// ClassNoscript: NOSCRIPT, or the function library not found even
	// after loading it (FUNCTION LOAD refused).
	ClassNoscript = "noscript"
	// ClassWrongtype: WRONGTYPE — a key under the store's prefix holds a
	// value of another type (something else wrote it).
	ClassWrongtype = "wrongtype"
	// ClassOther: any other error Redis answers (NOPERM, NOAUTH,
	// WRONGPASS, an ERR...), or a reply the store cannot read.
	ClassOther = "other"
)

// Classes lists every class, in a fixed order (the label values of the
// error counter).
var Classes = []string{ClassUnreachable, ClassOOM, ClassReadonly, ClassNoscript, ClassWrongtype, ClassOther}

// Error is the error of a failed Redis call: Op names the call ("take",
// "adjust", "release", "renew", "ping", "book"), Class what the failure
// means. It unwraps to the underlying error (and to store.ErrFull for a
// key refused at maxmemory).
type Error struct {
	Op    string
	Class string
	Err   error
	full  bool
}

// Error reads "redisstore: OP: MESSAGE".
func (e *Error) Error() string { return "redisstore: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the underlying error (and store.ErrFull for a new key
// refused at maxmemory).
func (e *Error) Unwrap() []error {
	if e.full {
		return []error{store.ErrFull, e.Err}
	}
	return []error{e.Err}
}

// Refused reports whether Redis was reached and refused the call (every
// class but ClassUnreachable). store/failover does not count a refusal as
// an outage: on_store_error does not apply, and the caller gets the error
// (a check answers 503), since admitting without a decision would turn the
// limits off for as long as Redis keeps refusing.
func (e *Error) Refused() bool { return e.Class != ClassUnreachable }

// errNewKeyAtOOM is the cause of a call refused because it would create a
// key while Redis is at maxmemory.
var errNewKeyAtOOM = errors.New("at maxmemory (OOM, maxmemory-policy noeviction) Redis takes no new key: a call that would create one is refused, calls on existing keys are still decided")

// Classify returns the class of err (a Redis call's error), or "" for nil
// and for a caller's own cancellation (context.Canceled).
func Classify(err error) string {
	if err == nil || errors.Is(err, context.Canceled) {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		if errors.Is(err, context.DeadlineExceeded) || isNetErr(err) || !strings.Contains(err.Error(), "unknown message type") {
			return ClassUnreachable
		}
		return ClassOther // not RESP: something else answers at the address
	}
	return classifyReply(re.Error())
}

// classifyReply classifies a Redis error reply by its code (its first
// word; from a script or function, the code of the command that failed
// inside it).
func classifyReply(msg string) string {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN":
		return ClassUnreachable
	case "OOM":
		return ClassOOM
	case "READONLY":
		return ClassReadonly
	case "NOSCRIPT":
		return ClassNoscript
	case "WRONGTYPE":
		return ClassWrongtype
	}
	// An error raised by a command inside a script carries its code after
	// the script's (Redis 6: "ERR Error running script ... -OOM ...").
	for _, c := range []struct{ in, class string }{
		{"max number of clients reached", ClassUnreachable},
		{"OOM command not allowed", ClassOOM},
		{"READONLY You can't write", ClassReadonly},
		{"Function not found", ClassNoscript},
		{"NOSCRIPT", ClassNoscript},
		{"WRONGTYPE", ClassWrongtype},
	} {
		if strings.Contains(msg, c.in) {
			return c.class
		}
	}
	return ClassOther
}

func isNetErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe)
}

// errStats counts failed calls per class, and remembers the last refusal
// of a key (WRONGTYPE) for Ping.
type errStats struct {
	n       [6]atomic.Uint64 // by index in Classes
	mu      sync.Mutex
	lastKey *Error    // the last WRONGTYPE
	lastAt  time.Time // when
}

// fail classifies err (a Redis call's, in operation op), counts it, and
// returns it as an *Error (a caller's cancellation is returned wrapped,
// not counted).
func (s *Store) fail(op string, err error) error {
	class := Classify(err)
	if class == "" {
		return &Error{Op: op, Class: ClassUnreachable, Err: err}
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Op: op, Class: class, Err: err}
	}
	s.count(e)
	return e
}

// full is the error of a call refused because it would create a key while
// Redis is at maxmemory (counted as ClassOOM).
func (s *Store) full(op string) error {
	e := &Error{Op: op, Class: ClassOOM, Err: errNewKeyAtOOM, full: true}
	s.count(e)
	return e
}

func (s *Store) count(e *Error) {
	for i, c := range Classes {
		if c == e.Class {
			s.errs.n[i].Add(1)
		}
	}
	if e.Class == ClassWrongtype {
		s.errs.mu.Lock()
		s.errs.lastKey, s.errs.lastAt = e, time.Now()
		s.errs.mu.Unlock()
	}
}

// ErrorCounts returns the failed Redis calls so far by class (every class
// of Classes present; a caller's own cancellations are not counted).
func (s *Store) ErrorCounts() map[string]uint64 {
	out := make(map[string]uint64, len(Classes))
	for i, c := range Classes {
		out[c] = s.errs.n[i].Load()
	}
	return out
}

// recentKeyRefusal is the last WRONGTYPE when it is at most
// keyRefusalWindow old (Ping reports it: a probe cannot see it).
func (s *Store) recentKeyRefusal() error {
	s.errs.mu.Lock()
	defer s.errs.mu.Unlock()
	if s.errs.lastKey != nil && time.Since(s.errs.lastAt) <= keyRefusalWindow {
		return s.errs.lastKey
	}
	return nil
}

// keyRefusalWindow is how long Ping reports a WRONGTYPE answered to a call.
const keyRefusalWindow = 10 * time.Second

// ErrConfig matches the error of Open when Redis, reached, refuses the
// connection's settings: a database number it does not have, a password or
// user it does not accept, or a peer that does not speak RESP (or fails
// TLS verification). Retrying cannot help: the settings must change.
var ErrConfig = errors.New("redisstore: Redis refused the connection settings")

// configError reports whether err, the error of the first connection,
// means Redis was reached and refused its settings (rather than not
// answering, or answering that it cannot serve yet).
func configError(err error) bool {
	if err == nil {
		return false
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		return classifyReply(re.Error()) != ClassUnreachable
	}
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &rh) || errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) {
		return true
	}
	return strings.Contains(err.Error(), "unknown message type")
}

// ErrorClass returns e.Class (for callers that read it without importing
// this package: the server's /readyz).
func (e *Error) ErrorClass() string { return e.Class }

// StillDecides reports whether a store answering this refusal still
// decides other calls: at maxmemory (ClassOOM) it decides the requests on
// existing keys, and a WRONGTYPE is one key's; a replica, a library that
// cannot be loaded or another refusal decides nothing.
func (e *Error) StillDecides() bool { return e.Class == ClassOOM || e.Class == ClassWrongtype }
