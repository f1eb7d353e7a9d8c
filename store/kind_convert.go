// Converting a key's state from one spec of a limit to another (a limit's
// parameters changed for some keys by an override): the SetLimit rule, per
// kind.

package store

import "github.com/sluicehq/sluice/bucket"

// SameState reports whether a state written under s reads the same under
// o, so that no conversion is due: the same kind and the same parameters
// of it (OnStoreError and BlockFor aside).
func (s *Spec) SameState(o *Spec) bool {
	if s == o {
		return true
	}
	if s.Kind != o.Kind {
		return false
	}
	switch s.Kind {
	case TokenBucket:
		return s.Bucket.Limit() == o.Bucket.Limit() && s.Bucket.Unit() == o.Bucket.Unit()
	case Concurrency:
		return true // (live slots mean the same under any spec)
	}
	return s.StateTag() == o.StateTag() && s.Capacity() == o.Capacity()
}

// Convert returns a key's state st (exists: it has one), written under
// spec from, as s reads it at now, and whether the key has a state under
// s. It is the SetLimit rule (docs/behaviour.md 1.7), so that changing a
// key's parameters never hands out a burst: a token bucket keeps the
// tokens it holds at now (bucket.Params.Convert: credit neither created
// nor lost, tokens above a smaller capacity dropped, fractions below the
// new unit rounded down, debt kept) and refills at s's rate from now,
// except that a bucket full at now is a new key's under s (a full bucket
// equals a new one, and a store may forget it at any time: idle eviction,
// a key's expiry; so every store decides it alike); a
// window or quota of the same length or period keeps its counts, counted
// against s's limit; one of another length or period, or of another kind,
// starts anew (no state). In-flight slots are the store's own and need no
// conversion.
func (s *Spec) Convert(from *Spec, st State, exists bool, now Now) (State, bool) {
	if !exists || from == nil || s.SameState(from) {
		return st, exists
	}
	if from.Kind != s.Kind {
		return State{}, false
	}
	if s.Kind == TokenBucket {
		p, q := &from.Bucket, &s.Bucket
		t, o, ph := st.tat()
		tat, origin, phase := BucketState(p, t, o, ph, true, now.Mono)
		if tat == 0 {
			return State{}, false // full: a new key's
		}
		nt := p.Convert(tat, bucket.Instant{Elapsed: now.Mono - origin, Phase: phase}, q)
		return bucketState(nt, now.Mono, 0), true
	}
	if s.StateTag() != from.StateTag() {
		return State{}, false
	}
	return st, true
}
