// The penalty box on Redis: instances sharing a block, expiry, a cluster.

package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

// Two instances (two stores on one Redis): a key one of them refuses is
// refused by both until its block ends, RetryAfter counting down to the
// end on each, whatever refills; a settle during the block keeps it; then
// both admit again. On both script paths and a window.
func TestPenaltyBoxSharedByInstances(t *testing.T) {
	ctx := context.Background()
	for _, l := range []store.Limit{
		{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 3, Rate: 1}},
		{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 3, Rate: limbRate / 33}},
		{Kind: store.SlidingWindow, Window: window.Limit{Limit: 3, Window: time.Second}},
	} {
		clock := sluice.NewManualClock(storetest.Epoch)
		p := prefix()
		a := open(t, redisstore.WithScriptClock(clock), redisstore.WithPrefix(p))
		b := open(t, redisstore.WithScriptClock(clock), redisstore.WithPrefix(p))
		l.BlockFor = 10 * time.Minute
		sp, err := store.NewSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		take := func(s *redisstore.Store, cost int64) sluice.Decision {
			t.Helper()
			items := []store.Item{{Key: "login:alice", Spec: sp, Cost: cost}}
			if _, err := s.Take(ctx, items); err != nil {
				t.Fatal(err)
			}
			return items[0].Decision
		}
		if d := take(a, 3); !d.Allowed {
			t.Fatalf("%v: %+v", l.Kind, d)
		}
		if d := take(a, 1); d.Allowed || d.RetryAfter != 10*time.Minute || d.Remaining != 0 {
			t.Fatalf("%v: the refusal on A: %+v", l.Kind, d)
		}
		for _, step := range []time.Duration{time.Second, time.Minute, 5 * time.Minute} {
			clock.Advance(step)
			left := 10*time.Minute - clock.Now().Sub(storetest.Epoch)
			for name, s := range map[string]*redisstore.Store{"A": a, "B": b} {
				if d := take(s, 1); d.Allowed || d.RetryAfter != left || d.Remaining != 0 {
					t.Fatalf("%v: %s during the block (%v left): %+v", l.Kind, name, left, d)
				}
				if d := take(s, 0); d.Allowed || d.RetryAfter != left {
					t.Fatalf("%v: %s's peek during the block: %+v", l.Kind, name, d)
				}
			}
			// A correction during the block leaves it in force.
			if err := b.Adjust(ctx, []store.Adjustment{{Key: "login:alice", Spec: sp, Delta: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(10*time.Minute - 6*time.Minute - time.Second)
		if d := take(b, 1); !d.Allowed {
			t.Fatalf("%v: B after the block: %+v", l.Kind, d)
		}
		if d := take(a, 1); !d.Allowed {
			t.Fatalf("%v: A after the block: %+v", l.Kind, d)
		}
	}
}

// On Redis' own clock, a blocked key lives until its block ends, though
// its state is new again long before.
func TestBlockedKeyOutlivesItsState(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1, Rate: 1000}, BlockFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	items := []store.Item{{Key: "k", Spec: sp, Cost: 1}}
	s.Take(ctx, items)
	items[0].Cost = 1
	if s.Take(ctx, items); items[0].Decision.Allowed {
		t.Skip("refilled before the second take (a slow machine)")
	}
	pttl, err := redistest.Do(srv.Addr(t), "PTTL", s.Key(store.TokenBucket, "k"))
	if n, _ := strconv.Atoi(strings.TrimPrefix(pttl, ":")); err != nil || n < 59_000 {
		t.Fatalf("PTTL %q %v, want about a minute", pttl, err)
	}
	time.Sleep(20 * time.Millisecond) // refilled: only the block refuses
	if s.Take(ctx, items); items[0].Decision.Allowed || items[0].Decision.RetryAfter < 59*time.Second {
		t.Fatalf("after the refill: %+v", items[0].Decision)
	}
}

// On a Redis Cluster, a request over two slots refused by a blocked key
// leaves the other slot's bucket as it was (taken, then refunded) and
// blocks only the key that refused, for every instance.
func TestClusterPenaltyBox(t *testing.T) {
	clock := sluice.NewManualClock(storetest.Epoch)
	p := prefix()
	a := openCluster(t, redisstore.WithScriptClock(clock), redisstore.WithPrefix(p))
	b := openCluster(t, redisstore.WithScriptClock(clock), redisstore.WithPrefix(p))
	ctx := context.Background()
	login, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 1, Rate: 1}, BlockFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wide := mustSpec(t, 10, 1)
	keys := []string{"login:alice", "global"}
	if redisstore.HashSlot(a.Key(store.TokenBucket, keys[0])) == redisstore.HashSlot(a.Key(store.TokenBucket, keys[1])) {
		t.Fatal("the keys must be in two slots")
	}
	if _, err := a.Take(ctx, []store.Item{{Key: keys[0], Spec: login, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	items := []store.Item{{Key: keys[0], Spec: login, Cost: 1}, {Key: keys[1], Spec: wide, Cost: 4}}
	if r, err := a.Take(ctx, items); err != nil || r.Allowed || items[0].Decision.RetryAfter != time.Minute || items[1].Decision.Remaining != 10 {
		t.Fatalf("%+v %v: %+v", r, err, items)
	}
	clock.Advance(20 * time.Second)
	one := []store.Item{{Key: keys[0], Spec: login, Cost: 1}}
	if _, err := b.Take(ctx, one); err != nil || one[0].Decision.Allowed || one[0].Decision.RetryAfter != 40*time.Second {
		t.Fatalf("B 20 s in: %+v %v", one[0].Decision, err)
	}
	g := []store.Item{{Key: keys[1], Spec: wide, Cost: 10}}
	if r, err := b.Take(ctx, g); err != nil || !r.Allowed {
		t.Fatalf("the other slot was refunded and is not blocked: %+v %v", g[0].Decision, err)
	}
}
