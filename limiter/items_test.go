// Tests of the one path from a request to store items: Check, CheckMany
// and Pause make the same keys and apply the same cost rules.

package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

const itemsSrc = `
limits:
  - name: tenant
    key: "tenant:{tenant}"
    hash_tag: "{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: daily
    key: "user:{user}"
    algorithm: quota
    limit: 100
    period: day
  - name: slots
    key: "tenant:{tenant}"
    max_in_flight: 2
    lease_ttl: 30s
  - name: trial
    key: "tenant:{tenant}"
    capacity: 3
    refill_per_second: 1
    shadow: true
costs:
  - when: {route: /export}
    cost: 4
`

// itemStore records the items a limiter asks a store to take, and the
// keys it adjusts.
type itemStore struct {
	store.Store
	took []store.Item
	adj  []string
}

func (s *itemStore) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	for _, it := range items {
		s.took = append(s.took, store.Item{Key: it.Key, Cost: it.Cost})
	}
	return s.Store.Take(ctx, items)
}

func (s *itemStore) Adjust(ctx context.Context, adj []store.Adjustment) error {
	for _, a := range adj {
		s.adj = append(s.adj, a.Key)
	}
	return s.Store.Adjust(ctx, adj)
}

// Check and CheckMany of one request ask the store for the same items
// (keys, costs: the policy's cost, a per-limit cost, one slot of an
// in-flight cap, 0 for a peek) and report the same statuses; Pause
// adjusts the token buckets' same keys.
func TestOneRequestOneSetOfItems(t *testing.T) {
	desc := map[string]string{"tenant": "acme", "user": "bob", "route": "/export"}
	for _, req := range []limiter.Request{
		{Descriptors: desc},
		{Descriptors: desc, Cost: 2},
		{Descriptors: desc, Costs: map[string]int64{"daily": 7}},
		{Descriptors: desc, Peek: true},
		{Descriptors: map[string]string{"user": "bob"}},
	} {
		t.Run(fmt.Sprint(req.Cost, req.Costs, req.Peek, len(req.Descriptors)), func(t *testing.T) {
			c := sluice.NewManualClock(epoch)
			one, many := &itemStore{Store: memstore.New(memstore.WithClock(c))}, &itemStore{Store: memstore.New(memstore.WithClock(c))}
			r1, err := limiterOver(t, itemsSrc, one).Check(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			rm, err := limiterOver(t, itemsSrc, many).CheckMany(context.Background(), []limiter.Request{req})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(one.took) != fmt.Sprint(many.took) {
				t.Fatalf("Check took %v, CheckMany %v", one.took, many.took)
			}
			r1.Slots, rm.Results[0].Slots = store.Slots{}, store.Slots{}
			if fmt.Sprintf("%+v", r1.Limits) != fmt.Sprintf("%+v", rm.Results[0].Limits) || r1.Cost != rm.Results[0].Cost {
				t.Fatalf("statuses differ:\nCheck     %+v\nCheckMany %+v", r1, rm.Results[0])
			}
		})
	}
	st := &itemStore{Store: memstore.New()}
	l := limiterOver(t, itemsSrc, st)
	r, err := l.Check(context.Background(), limiter.Request{Descriptors: desc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pause(context.Background(), desc, time.Second, []string{"tenant"}); err != nil {
		t.Fatal(err)
	}
	if len(st.adj) != 1 || st.adj[0] != st.took[0].Key || r.Limits[0].Key != "tenant:acme" {
		t.Fatalf("Pause adjusted %q, Check took %v (%+v)", st.adj, st.took, r.Limits[0])
	}
}

// The errors of a request are the same through Check and CheckMany, and
// nothing is taken.
func TestOneRequestOneSetOfErrors(t *testing.T) {
	desc := map[string]string{"tenant": "acme", "user": "bob"}
	for _, c := range []struct {
		req  limiter.Request
		want error
	}{
		{limiter.Request{Descriptors: desc, Cost: -1}, sluice.ErrInvalidCost},
		{limiter.Request{Descriptors: desc, Cost: 11}, sluice.ErrCostExceedsCapacity},
		{limiter.Request{Descriptors: desc, Costs: map[string]int64{"slots": 1}}, sluice.ErrInvalidCost},
		{limiter.Request{Descriptors: desc, Costs: map[string]int64{"nope": 1}}, limiter.ErrUnknownLimit},
		{limiter.Request{Descriptors: map[string]string{"x": "y"}, RefuseUnmatched: true}, limiter.ErrNoLimitApplies},
	} {
		st := &itemStore{Store: memstore.New()}
		l := limiterOver(t, itemsSrc, st)
		_, err1 := l.Check(context.Background(), c.req)
		_, errm := l.CheckMany(context.Background(), []limiter.Request{c.req})
		if !errors.Is(err1, c.want) || !errors.Is(errm, c.want) || err1.Error() != errm.Error() {
			t.Errorf("%+v: Check %v, CheckMany %v; want %v", c.req, err1, errm, c.want)
		}
		if len(st.took) != 0 {
			t.Errorf("%+v: took %v", c.req, st.took)
		}
	}
}

// The shadow rule, as the Envoy service applies it too: a shadow item
// above its capacity, or in a refused request, is peeked; its verdict is
// whether what is left covers the cost.
func TestDecideShadow(t *testing.T) {
	ms := memstore.New()
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: 3, Rate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	take := func(its []store.Item) (store.Result, error) { return ms.Take(context.Background(), its) }
	for i, c := range []struct {
		cost    int64
		refused bool
		after   int64 // the item's Cost after: 0 when peeked
		would   bool  // would refuse
	}{
		{2, true, 0, false}, // peeked: 3 left covers 2
		{2, false, 2, false},
		{4, false, 0, true}, // above the capacity: peeked, refused
		{2, false, 2, true}, // 1 left: refused, nothing taken
		{1, true, 0, false}, // peeked: 1 left covers 1
		{0, false, 0, false},
	} {
		one := []store.Item{{Key: "k", Spec: sp, Cost: c.cost}}
		if err := limiter.DecideShadow(one, c.refused, take); err != nil {
			t.Fatal(err)
		}
		if one[0].Cost != c.after || limiter.ShadowRefused(one[0], c.cost) != c.would {
			t.Fatalf("%d: %+v: cost %d, would refuse %v; want %d, %v", i, c, one[0].Cost, limiter.ShadowRefused(one[0], c.cost), c.after, c.would)
		}
	}
	failing := func([]store.Item) (store.Result, error) { return store.Result{}, errors.New("down") }
	one := []store.Item{{Key: "k", Spec: sp, Cost: 1}}
	if err := limiter.DecideShadow(one, false, failing); err == nil || limiter.ShadowRefused(one[0], 1) {
		t.Fatalf("a store error: %v, %+v (a shadow limit never refuses by failing)", err, one[0])
	}
}
