// TakeBorrowedAt: a decision at the caller's clock reading.

package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestTakeBorrowedAt: the store decides at the reading given (a token
// refilled at now+1s is there, not at now), and a store WithClock reads
// its own clock whatever it is given.
func TestTakeBorrowedAt(t *testing.T) {
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 1, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	take := func(s *memstore.Store, now time.Time) bool {
		items := []store.Item{{Key: "k", Spec: sp, Cost: 1}}
		r, err := s.TakeBorrowedAt(ctx, items, now)
		if err != nil {
			t.Fatal(err)
		}
		return r.Allowed
	}
	s := memstore.New()
	now := time.Now()
	if !take(s, now) || take(s, now) || take(s, now.Add(500*time.Millisecond)) || !take(s, now.Add(1001*time.Millisecond)) {
		t.Fatal("decisions not at the readings given")
	}
	clk := &fixedClock{t: time.Unix(1_700_000_000, 0)}
	s = memstore.New(memstore.WithClock(clk))
	if !take(s, now) || take(s, now.Add(time.Hour)) {
		t.Fatal("a store WithClock decided at the reading given")
	}
}

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }
