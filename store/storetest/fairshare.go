// Fair shares' conformance (docs/behaviour.md "Fair shares"): a store
// deciding items of a fair-share spec (store.Spec.FairShare) keeps each
// key's tenant set and decides by store.Spec.DecideShare. RunFairShare is
// apart from Run so that a store adopts it when it implements the rule.

package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// RunFairShare runs the fair-share cases against stores made by f.
func RunFairShare(t *testing.T, f Factory) {
	for _, c := range []struct {
		name string
		test func(*testing.T, Factory)
	}{
		{"Vector", testShareVector},
		{"AllOrNothing", testShareAllOrNothing},
		{"ExpiryAndMaxTenants", testShareHolders},
		{"IdenticalToPureModel", testShareModel},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, f) })
	}
}

// ShareSpec is a token bucket of capacity at rate per second with a fair
// share of active window w and max tenants n.
func ShareSpec(t testing.TB, capacity int64, rate float64, w time.Duration, n int) *store.Spec {
	t.Helper()
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.Limit{Capacity: capacity, Rate: rate},
		FairShare: store.FairShare{ActiveWindow: w, MaxTenants: n}})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func fair(sp *store.Spec, tenant string, w uint32, cost int64) store.Item {
	return store.Item{Key: "fs", Spec: sp, Cost: cost, Tenant: tenant, Weight: w}
}

// The worked vector of docs/behaviour.md "Fair shares": capacity 10 at 10
// per second; b takes 1 and a 5 uncontended (the bucket alone); with 4
// left the bucket is contended and each 1-token take moves its holder's
// virtual time 0.2 s (two holders of weight 1), at most τ/2 = 0.5 s ahead.
func testShareVector(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := ShareSpec(t, 10, 10, 10*time.Second, 100)
	for _, st := range []struct {
		tenant string
		cost   int64
		ok     bool
		retry  time.Duration
		rem    int64
	}{
		{"b", 1, true, 0, 9}, {"a", 5, true, 0, 4},
		{"a", 1, true, 0, 3}, {"a", 1, true, 0, 2},
		{"a", 1, false, 100 * time.Millisecond, 2}, // the share refuses: a is 0.4 s ahead, 0.6 s with it
		{"b", 1, true, 0, 1},
	} {
		r := take(t, s, fair(sp, st.tenant, 1, st.cost))
		d := r.Decisions[0]
		if r.Allowed != st.ok || d.RetryAfter != st.retry || d.Remaining != st.rem {
			t.Fatalf("rule: fair share vector: %s takes %d: %+v, want allowed %v retry %v remaining %d", st.tenant, st.cost, d, st.ok, st.retry, st.rem)
		}
	}
	c.Advance(100 * time.Millisecond) // a is 0.3 s ahead now, 0.5 s with one more: within τ/2
	if r := take(t, s, fair(sp, "a", 1, 1)); !r.Allowed {
		t.Fatalf("rule: after RetryAfter the share admits: %+v", r.Decisions[0])
	}
	// A peek reads no share and touches nothing.
	if r := take(t, s, fair(sp, "a", 1, 0)); !r.Allowed || r.Decisions[0].Remaining != 1 {
		t.Fatalf("rule: a peek is the bucket's: %+v", r.Decisions[0])
	}
}

// A share refusal refuses the whole request; vtat is written only when it
// is admitted, the touch either way.
func testShareAllOrNothing(t *testing.T, f Factory) {
	s, _ := open(t, f)
	sp := ShareSpec(t, 10, 10, 10*time.Second, 100)
	tiny := spec(t, 1, 0.001)
	take(t, s, fair(sp, "a", 1, 6)) // 4 left: contended
	// c asks with an item that refuses (tiny holds 0 after the first):
	// nothing is taken, c's vtat is not written, but c is touched (Σw 2).
	take(t, s, store.Item{Key: "tiny", Spec: tiny, Cost: 1})
	r := take(t, s, fair(sp, "c", 1, 1), store.Item{Key: "tiny", Spec: tiny, Cost: 1})
	if r.Allowed || !r.Decisions[0].Allowed {
		t.Fatalf("rule: all or nothing: %+v", r)
	}
	// a: inc 0.2 s (Σw 2: c is active): two takes, the third refused.
	for i, ok := range []bool{true, true, false} {
		if r := take(t, s, fair(sp, "a", 1, 1)); r.Allowed != ok {
			t.Fatalf("rule: a refused request's tenant is touched (counts in Σw): a's take %d: %+v", i, r.Decisions[0])
		}
	}
	// c's vtat was not written by its refused request: it takes 2 at once.
	for i := range 2 {
		if r := take(t, s, fair(sp, "c", 1, 1)); !r.Allowed {
			t.Fatalf("rule: a refused request writes no virtual time: c's take %d: %+v", i, r.Decisions[0])
		}
	}
	// A share refusal of one item refuses the other item too.
	big := spec(t, 100, 1)
	r = take(t, s, store.Item{Key: "big", Spec: big, Cost: 1}, fair(sp, "a", 1, 1))
	if r.Allowed || !r.Decisions[0].Allowed || r.Decisions[1].Allowed || r.Decisions[1].RetryAfter <= 0 {
		t.Fatalf("rule: a share refusal refuses the request: %+v", r)
	}
	if p := take(t, s, store.Item{Key: "big", Spec: big}); p.Decisions[0].Remaining != 100 {
		t.Fatalf("rule: a share refusal takes nothing from the other items: %+v", p.Decisions[0])
	}
}

// Holders expire after the active window; past max tenants new tenants
// share the "other" holder with weight 1.
func testShareHolders(t *testing.T, f Factory) {
	s, c := open(t, f)
	sp := ShareSpec(t, 100, 10, time.Second, 2)
	take(t, s, fair(sp, "x", 1, 60)) // 40 left
	take(t, s, fair(sp, "y", 1, 1))  // y: Σw 2
	// z (weight 9) and w (weight 5) fold into "other", weight 1: Σw 3.
	take(t, s, fair(sp, "z", 9, 1))
	take(t, s, fair(sp, "w", 5, 1))
	// 0.5 s later (42 left: contended) x's 1-token take is 0.3 s of
	// virtual time; τ/2 is 5 s: 16 takes pass (4.8 s), the 17th (5.1 s)
	// is refused.
	c.Advance(500 * time.Millisecond)
	n := 0
	for range 20 {
		if take(t, s, fair(sp, "x", 1, 1)).Allowed {
			n++
		}
	}
	if n != 16 {
		t.Fatalf("rule: past max_tenants, tenants share one holder of weight 1: x took %d, want 16 (Σw 3)", n)
	}
	// 0.6 s later y, z and w (last seen 1.1 s ago) have expired, x (0.6
	// s) has not: x alone, Σw 1, inc 0.1 s; its virtual time is 4.2 s
	// ahead: 8 takes pass (5.0 s), the 9th (5.1 s) is refused.
	c.Advance(600 * time.Millisecond)
	n = 0
	for range 20 {
		if take(t, s, fair(sp, "x", 1, 1)).Allowed {
			n++
		}
	}
	if n != 8 {
		t.Fatalf("rule: holders not seen within the active window expire: x took %d, want 8 (Σw 1)", n)
	}
}

// shareRef is the model's key: a bucket and a tenant set.
type shareRef struct {
	tat, origin int64
	phase       uint64
	exists      bool
	holders     map[string]*shareHolder
}

type shareHolder struct {
	lastSeen, vtat int64
	weight         uint32
}

// Random traces of fair-share requests (tenants and weights, classes'
// reserves, bookings, a plain item beside), decided as the rule says with
// maps and store.Spec.DecideShare.
func testShareModel(t *testing.T, f Factory) {
	s, c := open(t, f)
	specs := []*store.Spec{ShareSpec(t, 10, 3, 2*time.Second, 3), ShareSpec(t, 100, 50, 500*time.Millisecond, 5), ShareSpec(t, 7, 1.0/3, 30*time.Second, 2)}
	plain := spec(t, 5, 2)
	refs := map[string]*shareRef{}
	var plainRef shareRef
	rng := rand.New(rand.NewPCG(28, 28))
	var now int64
	tenants := []string{"", "a", "b", "c", "d", "e", "f"}
	for step := range 4000 {
		now += rng.Int64N(int64(300 * time.Millisecond))
		c.Set(Epoch.Add(time.Duration(now)))
		i := rng.IntN(len(specs))
		sp := specs[i]
		key := fmt.Sprint("fs", i, "-", rng.IntN(2))
		it := store.Item{Key: key, Spec: sp, Cost: rng.Int64N(sp.Capacity()/2 + 2), Tenant: tenants[rng.IntN(len(tenants))], Weight: uint32(rng.IntN(4))}
		if rng.IntN(4) == 0 {
			it.MaxWait = time.Duration(rng.Int64N(int64(3 * time.Second)))
		}
		if rng.IntN(4) == 0 {
			it.Reserve = uint32(rng.IntN(3)) * 250_000
			it.Cost = min(it.Cost, sp.ClassCapacity(it.Reserve)) // (above it: invalid, Validate)
		}
		items := []store.Item{it}
		withPlain := rng.IntN(3) == 0
		if withPlain {
			items = append(items, store.Item{Key: "plain", Spec: plain, Cost: min(rng.Int64N(4), plain.ClassCapacity(it.Reserve)), MaxWait: it.MaxWait, Reserve: it.Reserve})
		}
		r := take(t, s, items...)
		rf := refs[key]
		if rf == nil {
			rf = &shareRef{holders: map[string]*shareHolder{}}
			refs[key] = rf
		}
		at := store.Now{Mono: now, Wall: Epoch.UnixNano() + now}
		// The fair item, as the rule decides it.
		var o store.ShareOutcome
		var h *shareHolder
		if it.Cost > 0 {
			fs := sp.FairShare
			var sum uint64
			for name, x := range rf.holders {
				if fs.Expired(x.lastSeen, now) {
					delete(rf.holders, name)
				} else {
					sum += uint64(x.weight)
				}
			}
			_, present := rf.holders[it.Tenant]
			name := fs.Holder(it.Tenant, present, len(rf.holders))
			w := store.HolderWeight(it.Weight, name != it.Tenant)
			if h = rf.holders[name]; h == nil {
				h = &shareHolder{}
				rf.holders[name] = h
			} else {
				sum -= uint64(h.weight)
			}
			h.lastSeen, h.weight = now, w
			sum += uint64(w)
			o = sp.DecideShare(modelState(rf), rf.exists, at, it.Cost, it.MaxWait, it.Reserve, h.vtat, w, sum)
		} else {
			o.State, o.Decision = sp.StepReserved(modelState(rf), rf.exists, at, 0, it.Reserve)
		}
		want := []sluice.Decision{o.Decision}
		next := []store.State{o.State}
		if withPlain {
			var st store.State
			var d sluice.Decision
			if items[1].MaxWait > 0 && items[1].Cost > 0 {
				st, d, _ = plain.BookReserved(modelState(&plainRef), plainRef.exists, at, items[1].Cost, items[1].MaxWait, items[1].Reserve)
			} else {
				st, d = plain.StepReserved(modelState(&plainRef), plainRef.exists, at, items[1].Cost, items[1].Reserve)
			}
			want, next = append(want, d), append(next, st)
		}
		allowed := true
		for _, d := range want {
			allowed = allowed && d.Allowed
		}
		refsOf := []*shareRef{rf, &plainRef}
		for j := range want {
			if !allowed && want[j].Allowed && items[j].Cost > 0 {
				sp := items[j].Spec
				_, p := sp.StepReserved(modelState(refsOf[j]), refsOf[j].exists, at, 0, items[j].Reserve)
				want[j] = sluice.Decision{Allowed: true, Remaining: p.Remaining, ResetAfter: p.ResetAfter}
			}
		}
		if r.Allowed != allowed {
			t.Fatalf("rule: the store decides fair shares as the rule: step %d %+v: store allowed %v, model %v (%+v)", step, items, r.Allowed, allowed, want)
		}
		for j := range want {
			if r.Decisions[j] != want[j] {
				t.Fatalf("rule: the store decides fair shares as the rule: step %d item %d %+v: store %+v, model %+v", step, j, items[j], r.Decisions[j], want[j])
			}
		}
		if allowed {
			for j := range want {
				if items[j].Cost > 0 || refsOf[j].exists {
					setModelState(refsOf[j], next[j])
				}
			}
			if it.Cost > 0 && o.Contended {
				h.vtat = o.VTAT
			}
		}
	}
}

func modelState(r *shareRef) store.State {
	return store.State{r.tat, r.origin, int64(r.phase)}
}

// setModelState keeps st as r's bucket state.
func setModelState(r *shareRef, st store.State) {
	r.tat, r.origin, r.phase, r.exists = st[0], st[1], uint64(st[2]), true
}
