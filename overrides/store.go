// Store: where the API's overrides are shared between instances, and the
// changes an instance polls to keep its Set fresh.
package overrides

import (
	"context"
	"errors"
	"time"
)

// Store holds the API's overrides (Source "api"), shared by every
// instance that uses it. Implementations are safe for concurrent use:
// NewMemStore (one process, with an optional state file) and
// store/redisstore (Redis and Redis Cluster). overridetest.Run is the
// suite every implementation passes.
//
// An instance keeps a Set fresh by calling Changes with the version of the
// last answer, about once a second (Sync); the decision path never calls
// the Store.
type Store interface {
	// Put creates or replaces the override of (o.Name, o.Match) and
	// returns the record stored: o, with the CreatedAt of the live record
	// it replaces when there is one. o must be valid (Validate) and
	// stamped (Stamp). A Put that would add an override to a store
	// holding its maximum of live ones fails with ErrTooMany, changing
	// nothing; a replacement never does.
	Put(ctx context.Context, o Override) (Override, error)
	// Delete removes the override of limit name with match m; ErrNotFound
	// when there is no live one.
	Delete(ctx context.Context, name string, m map[string]string) error
	// Changes returns what changed after version since, and the version
	// to pass next time. With since 0, or a version the store cannot
	// answer from (too old, or newer than its own after a reset), it
	// answers Full: every live record. An override is live until its
	// ExpiresAt; an expired one is reported deleted (at the latest by
	// the first Changes after it expires). A record changed several times
	// since is reported once, as it is now.
	Changes(ctx context.Context, since uint64) (Changes, error)
	// Close releases the store's resources; calls after it fail with
	// ErrClosed.
	Close() error
}

// Changes is a Store's answer to Changes.
type Changes struct {
	// Version is the store's version after these changes.
	Version uint64
	// Full says that Records is every live record (replace, do not
	// merge); Deleted is then empty.
	Full bool
	// Records are the records created or replaced, as they are now.
	Records []Override
	// Deleted are the keys of the records deleted or expired.
	Deleted []Key
}

// ErrClosed reports a call on a closed Store.
var ErrClosed = errors.New("overrides: store closed")

// Sync applies to s the Store's changes since the last Sync (one Changes
// call): the loop an instance runs about once a second, then Sweep. It
// returns the Changes error, else the records the policy refused (Apply).
// Calls must not overlap. A PutShared or DeleteShared on this instance
// while a Sync is under way may be undone here by that Sync's older view
// until the next one (at most one period).
func Sync(ctx context.Context, s *Set, st Store) ([]error, error) {
	ch, err := st.Changes(ctx, s.Version())
	if err != nil {
		return nil, err
	}
	if !ch.Full && len(ch.Records) == 0 && len(ch.Deleted) == 0 && ch.Version == s.Version() {
		return nil, nil
	}
	return s.Apply(ch), nil
}

// PutShared is the API's PUT: it validates o against s's policy
// (Validate), refuses the key of a policy override (ErrPolicyOverride),
// stamps o at now (Stamp; the store keeps the first CreatedAt), stores it
// in st (ErrTooMany, or st's error) and puts the stored record in s, so
// that this instance applies it from its next decision and the others
// from their next Sync. It returns the record stored. On error nothing
// has changed.
func PutShared(ctx context.Context, s *Set, st Store, o Override, now time.Time) (Override, error) {
	o.Source = SourceAPI
	if err := Validate(&o, s.Policy()); err != nil {
		return Override{}, err
	}
	if r := s.Get(o.Name, o.Match); r != nil && r.policy {
		return Override{}, errorf(ErrPolicyOverride, o.Name, "match", "the policy file sets the override of %s: the API cannot change it", CanonicalMatch(o.Match))
	}
	o.Stamp(now, time.Time{})
	stored, err := st.Put(ctx, o)
	if err != nil {
		return Override{}, err
	}
	_ = s.Put(&stored) // (refused only after a policy reload in between: Sync settles it)
	return stored, nil
}

// DeleteShared is the API's DELETE: ErrPolicyOverride for a policy
// override's key, else st.Delete (ErrNotFound when st has none), then the
// override leaves s at once (the other instances at their next Sync).
func DeleteShared(ctx context.Context, s *Set, st Store, name string, m map[string]string) error {
	if r := s.Get(name, m); r != nil && r.policy {
		return errorf(ErrPolicyOverride, name, "match", "the policy file sets the override of %s: the API cannot delete it", CanonicalMatch(m))
	}
	if err := st.Delete(ctx, name, m); err != nil {
		return err
	}
	_ = s.Delete(name, m) // (ErrNotFound: not synced here yet)
	return nil
}
