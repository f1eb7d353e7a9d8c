// Fair-share items and the cache: a share's refusal is one tenant's, so it
// is neither answered from nor kept in the cache.

package refusal_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Vector F1's first rows (docs/behaviour.md section 8): after zed's share
// refuses it on a bucket holding 3 tokens, acme (weight 3, an idle virtual
// time) is admitted on the same key; a cached refusal would refuse every
// tenant of the key until zed's RetryAfter.
func TestFairShareNotCached(t *testing.T) {
	s, inner, _ := setup(t, 100)
	l := bucketLimit(10, 10)
	l.FairShare = store.FairShare{ActiveWindow: 10 * time.Second, MaxTenants: store.DefaultMaxTenants}
	sp := mustSpec(t, l)
	item := func(tenant string, w uint32, cost int64) store.Item {
		return store.Item{Key: "p:1", Spec: sp, Cost: cost, Tenant: tenant, Weight: w}
	}
	for i, step := range []struct {
		it    store.Item
		admit bool
	}{
		{item("zed", 1, 1), true},
		{item("acme", 3, 5), true},
		{item("zed", 1, 1), true},
		{item("zed", 1, 1), false}, // the share's refusal: 3 tokens left
		{item("zed", 1, 1), false},
		{item("acme", 3, 1), true},
	} {
		if r, _ := take1(t, s, step.it); r.Allowed != step.admit {
			t.Fatalf("step %d (%s): allowed %v, want %v", i, step.it.Tenant, r.Allowed, step.admit)
		}
	}
	if st := s.Stats(); st.Hits != 0 || inner.takes.Load() != 6 {
		t.Fatalf("answered from the cache: %+v, %d store calls of 6", st, inner.takes.Load())
	}
}
