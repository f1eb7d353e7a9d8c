// The penalty box's rule (Spec.Penalize) and its traits.

package store_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// Spec.Penalize, the rule every store applies: a refusal of a cost starts
// a block; during it every decision is refused with Remaining 0 and the
// later of the block's end and the kind's own waits; an admission, a peek
// or a block ended leaves the decision; no BlockFor changes nothing.
func TestPenalize(t *testing.T) {
	t.Parallel()
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 5, Rate: 1}, BlockFor: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int64) store.Now { return store.Now{Mono: s * 1e9, Wall: 1e18 + s*1e9} }
	refused := sluice.Decision{Remaining: 2, RetryAfter: time.Second, ResetAfter: 3 * time.Second}
	admitted := sluice.Decision{Allowed: true, Remaining: 4, ResetAfter: time.Second}
	for _, c := range []struct {
		name      string
		dec       sluice.Decision
		until     int64
		now       store.Now
		cost      int64
		want      sluice.Decision
		wantUntil int64
		start     bool
	}{
		{"a refusal starts a block", refused, 0, at(100), 3, sluice.Decision{RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second}, 110e9, true},
		{"a refusal after a block ended starts another", refused, 90e9, at(100), 3, sluice.Decision{RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second}, 110e9, true},
		{"an admission is left as it is", admitted, 0, at(100), 1, admitted, 0, false},
		{"a peek refused starts none", refused, 0, at(100), 0, refused, 0, false},
		{"during a block an admission is refused", admitted, 104e9, at(100), 1, sluice.Decision{RetryAfter: 4 * time.Second, ResetAfter: 4 * time.Second}, 104e9, false},
		{"during a block a peek is refused", admitted, 104e9, at(100), 0, sluice.Decision{RetryAfter: 4 * time.Second, ResetAfter: 4 * time.Second}, 104e9, false},
		{"a refusal during a block keeps its end", refused, 100e9 + 1, at(100), 1, sluice.Decision{RetryAfter: time.Second, ResetAfter: 3 * time.Second}, 100e9 + 1, false},
		{"the kind's own wait when later", sluice.Decision{RetryAfter: time.Hour, ResetAfter: 2 * time.Hour}, 0, at(100), 1, sluice.Decision{RetryAfter: time.Hour, ResetAfter: 2 * time.Hour}, 110e9, true},
		{"a block ends at its end", admitted, 100e9, at(100), 1, admitted, 0, false},
	} {
		got, until, start := sp.Penalize(c.dec, c.until, c.now, c.cost)
		if got != c.want || until != c.wantUntil || start != c.start {
			t.Errorf("%s: %+v until %d start %v, want %+v until %d start %v", c.name, got, until, start, c.want, c.wantUntil, c.start)
		}
	}
	plain, _ := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 5, Rate: 1}})
	if got, until, start := plain.Penalize(admitted, 104e9, at(100), 1); got != admitted || until != 104e9 || start {
		t.Errorf("no BlockFor: %+v %d %v", got, until, start)
	}
	if sp.Leasable() || !plain.Leasable() {
		t.Errorf("Leasable: %v with a block_for, %v without", sp.Leasable(), plain.Leasable())
	}
	for _, k := range store.Kinds() {
		if k.Blockable() == k.HoldsSlots() {
			t.Errorf("%v: Blockable %v", k, k.Blockable())
		}
	}
}
