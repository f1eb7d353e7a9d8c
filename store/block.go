// The penalty box (Spec.BlockFor): a key refused by a limit that has one
// stays refused until its block ends, whatever it regains meanwhile.

package store

import (
	"time"

	"github.com/sluicehq/sluice"
)

// MaxBlockFor is the longest BlockFor (100 days): a longer refusal is a
// deny, not a penalty.
const MaxBlockFor = 100 * 24 * time.Hour

// Leasable reports whether store/lease may serve s's items from token
// batches held in process: s's kind is Leasable and s has no BlockFor nor
// FairShare (a block, and a tenant set, must be decided, and kept, by the
// shared store).
func (s *Spec) Leasable() bool { return s.Kind.Leasable() && s.BlockFor == 0 && s.FairShare == nil }

// Penalize applies s's penalty box to dec, the decision just made for an
// item of cost on a key whose block ends at until (Now.Mono ns; a block
// ends when now.Mono reaches it, and 0 is none), and returns the decision
// to report, the key's block after it, and whether it starts a block (the
// store must then keep until with the key's state, atomically with the
// decision: the request is refused, nothing else is written).
//
// With BlockFor 0 it changes nothing (a block a key has is ignored, and
// kept). Otherwise:
//   - while a block is in force (now.Mono < until) every decision is
//     refused, a peek's too, and takes nothing: Remaining 0, RetryAfter
//     the later of the block's end and the kind's own wait for cost,
//     ResetAfter the later of the block's end and the kind's own;
//   - with no block in force, a refusal of a cost above 0 starts one,
//     ending BlockFor from now, and reports as above; a refusal during a
//     block does not move its end, so that RetryAfter counts down to it;
//   - anything else (an admission, a peek) is dec unchanged, and a block
//     that has ended is forgotten (until 0).
//
// Every store applies it, so that the same trace gives the same decisions
// whatever the store.
func (s *Spec) Penalize(dec sluice.Decision, until int64, now Now, cost int64) (sluice.Decision, int64, bool) {
	if s.BlockFor <= 0 {
		return dec, until, false
	}
	start := false
	if until <= now.Mono {
		if dec.Allowed || cost == 0 {
			return dec, 0, false
		}
		until, start = now.Mono+int64(s.BlockFor), true
	}
	left := time.Duration(until - now.Mono)
	dec.Allowed, dec.Remaining = false, 0
	dec.RetryAfter = max(dec.RetryAfter, left)
	dec.ResetAfter = max(dec.ResetAfter, left)
	return dec, until, start
}

// checkBlockFor validates a limit's BlockFor for kind k.
func checkBlockFor(k Kind, d time.Duration) error {
	switch {
	case d < 0:
		return sluice.Errorf(sluice.ErrInvalidLimit, "block_for %v must be positive", d)
	case d > MaxBlockFor:
		return sluice.Errorf(sluice.ErrInvalidLimit, "block_for %v is longer than %v (100 days): deny the key instead", d, MaxBlockFor)
	case d > 0 && !k.Blockable():
		return sluice.Errorf(sluice.ErrInvalidLimit, "a %s limit takes no block_for: its refusals end as soon as a slot is released", k)
	}
	return nil
}
