// The penalty box in the in-memory store: blocks, their countdown, all or nothing.

package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

func blockSpec(t *testing.T, l store.Limit) *store.Spec {
	t.Helper()
	sp, err := store.NewSpec(l)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// The penalty box: once refused, a key stays refused BlockFor from the
// refusal whatever it regains, RetryAfter counting down to the end, a peek
// showing it; a refusal during the block does not move its end; then the
// key decides as its kind does.
func TestPenaltyBox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		l    store.Limit
		own  time.Duration // the kind's own wait after the last take
	}{
		{"token bucket", store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 3, Rate: 1}}, time.Second},
		{"sliding window", store.Limit{Kind: store.SlidingWindow, Window: window.Limit{Limit: 3, Window: time.Second}}, 0},
		{"fixed window", store.Limit{Kind: store.FixedWindow, Window: window.Limit{Limit: 3, Window: time.Second}}, 0},
		{"quota", store.Limit{Kind: store.Quota, Quota: quota.Limit{Limit: 3, Period: quota.Day}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := sluice.NewManualClock(storetest.Epoch)
			s := memstore.New(memstore.WithClock(clock))
			l := tc.l
			l.BlockFor = 10 * time.Second
			sp := blockSpec(t, l)
			take := func(cost int64) sluice.Decision {
				t.Helper()
				items := []store.Item{{Key: "login:alice", Spec: sp, Cost: cost}}
				r, err := s.Take(ctx, items)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed != items[0].Decision.Allowed {
					t.Fatalf("result %v, item %+v", r.Allowed, items[0].Decision)
				}
				return items[0].Decision
			}
			if d := take(3); !d.Allowed {
				t.Fatalf("first take: %+v", d)
			}
			d := take(1)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter < 10*time.Second || d.ResetAfter < 10*time.Second {
				t.Fatalf("the refusal that blocks: %+v", d)
			}
			if tc.l.Kind != store.Quota && d.RetryAfter != 10*time.Second {
				t.Fatalf("RetryAfter %v, want the block's 10s", d.RetryAfter)
			}
			clock.Advance(4 * time.Second) // a bucket and the windows have all back
			if d := take(1); d.Allowed || (tc.l.Kind != store.Quota && d.RetryAfter != 6*time.Second) || d.Remaining != 0 {
				t.Fatalf("4s into the block: %+v, want refused, retry 6s", d)
			}
			if d := take(0); d.Allowed || (tc.l.Kind != store.Quota && d.RetryAfter != 6*time.Second) {
				t.Fatalf("a peek during the block: %+v", d)
			}
			clock.Advance(6*time.Second - 1)
			if d := take(1); d.Allowed || (tc.l.Kind != store.Quota && d.RetryAfter != 1) {
				t.Fatalf("1ns before the end: %+v (refusals during a block do not extend it)", d)
			}
			clock.Advance(1)
			if tc.l.Kind == store.Quota { // used up for the day: refused, and blocked again
				if d := take(1); d.Allowed || d.RetryAfter < 10*time.Second {
					t.Fatalf("quota after the block: %+v", d)
				}
				return
			}
			if d := take(1); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after the block: %+v, want admitted with 2 left", d)
			}
		})
	}
}

// A request refused by a limit with a block and admitted by another takes
// from neither, and blocks only the key that refused.
func TestPenaltyBoxAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(clock))
	blocked := blockSpec(t, store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1, Rate: 1}, BlockFor: time.Minute})
	other := blockSpec(t, store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 5, Rate: 1}, BlockFor: time.Minute})
	if _, err := s.Take(ctx, []store.Item{{Key: "a", Spec: blocked, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	items := []store.Item{{Key: "a", Spec: blocked, Cost: 1}, {Key: "b", Spec: other, Cost: 2}}
	r, err := s.Take(ctx, items)
	if err != nil || r.Allowed || items[0].Decision.RetryAfter != time.Minute || !items[1].Decision.Allowed || items[1].Decision.Remaining != 5 {
		t.Fatalf("%+v %v: %+v", r, err, items)
	}
	clock.Advance(30 * time.Second)
	b := []store.Item{{Key: "b", Spec: other, Cost: 5}}
	if r, _ := s.Take(ctx, b); !r.Allowed {
		t.Fatalf("b was never refused, so never blocked: %+v", b[0].Decision)
	}
	a := []store.Item{{Key: "a", Spec: blocked, Cost: 1}}
	if r, _ := s.Take(ctx, a); r.Allowed || a[0].Decision.RetryAfter != 30*time.Second {
		t.Fatalf("a: %+v", a[0].Decision)
	}
	// A spec without BlockFor ignores the block (an override that set it
	// deleted); the block is kept and applies again under one with it.
	plain := blockSpec(t, store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1, Rate: 1}})
	p := []store.Item{{Key: "a", Spec: plain, Cost: 0}}
	if s.Take(ctx, p); !p[0].Decision.Allowed {
		t.Fatalf("without block_for: %+v", p[0].Decision)
	}
	if s.Take(ctx, a); a[0].Decision.Allowed || a[0].Decision.RetryAfter != 30*time.Second {
		t.Fatalf("a again: %+v", a[0].Decision)
	}
}

// block_for: positive, at most MaxBlockFor, and not on kinds that hold
// slots.
func TestBlockForValidated(t *testing.T) {
	t.Parallel()
	for _, l := range []store.Limit{
		{Kind: store.Concurrency, MaxInFlight: 1, SlotTTL: time.Second, BlockFor: time.Second},
		{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1, Rate: 1}, BlockFor: -time.Second},
		{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1, Rate: 1}, BlockFor: store.MaxBlockFor + 1},
	} {
		if _, err := store.NewSpec(l); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v", l, err)
		}
	}
}
