package memstore_test

// Eviction at the cap: a flood of new keys locks nobody out, idle keys go
// first, then the CLOCK hand's order (a key used since the hand last passed
// it outlives every other key's next pass), a refused request evicts
// nothing, and an evicted key gains at most one capacity.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
	"github.com/sluicehq/sluice/window"
)

// The flood: with a cap of 1,000, 1,200 distinct users on a 24 h
// window, while a tenant keeps using its bucket. Every request is
// admitted (before eviction of keys with state the 1,001st user on was
// refused for 24 h, and so was the tenant once its bucket was full and
// evicted), the tenant keeps its state throughout, and every eviction
// keeps the CLOCK order (clockModel).
func TestFloodLocksNobodyOut(t *testing.T) {
	t.Parallel()
	for _, capN := range []int{1000, 5000} { // (5,000: about 78 keys a shard, whole words of marks)
		flood(t, capN)
	}
}

func flood(t *testing.T, capN int) {
	c := sluice.NewManualClock(storetest.Epoch)
	var evicted []string
	m := newClockModel(t)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(capN), memstore.OnPass(m.passed),
		memstore.OnLRU(func(k string, d int64) { evicted = append(evicted, k); m.evicted(k, d) }))
	day := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 100, Window: 24 * time.Hour}}
	tenant, _ := store.NewBucketSpec(bucket.Limit{Capacity: 100, Rate: 1.5}) // (never full again: never idle)
	ctx := context.Background()
	users := capN * 6 / 5
	for i := range users {
		c.Advance(10 * time.Millisecond)
		user := fmt.Sprint("user:", i)
		if _, err := take1(t, s, store.Item{Key: user, Spec: day, Cost: 1}); err != nil {
			t.Fatalf("cap %d, user %d: %v", capN, i, err)
		}
		m.used(user)
		if i%50 == 0 { // the tenant, every 0.5 s: one token taken, 0.75 refilled
			items := []store.Item{{Key: "tenant:acme", Spec: tenant, Cost: 1}}
			r, err := s.Take(ctx, items)
			if err != nil || !r.Allowed {
				t.Fatalf("cap %d, tenant at user %d: %+v %v", capN, i, items[0].Decision, err)
			}
			m.used("tenant:acme")
		}
		m.check()
	}
	if slices.Contains(evicted, "tenant:acme") {
		t.Fatalf("cap %d: the tenant, in use, was evicted", capN)
	}
	if st := s.Stats(); st.Keys != int64(capN) {
		t.Fatalf("cap %d: %+v", capN, st)
	}
	want := users + 1 - capN
	idle, lru := s.EvictionsByReason()
	if idle != 0 || lru != uint64(want) || len(evicted) != want {
		t.Fatalf("cap %d: evictions: %d idle, %d lru (%d seen), want %d lru", capN, idle, lru, len(evicted), want)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(evicted)))) != want {
		t.Fatalf("cap %d: a key was evicted twice", capN)
	}
}

// clockModel checks the order of evictions the package documentation
// states, from the uses of keys (used: a request found or created the key)
// and the CLOCK hand's passes (OnPass) and LRU evictions (OnLRU), in a
// trace with no idle key: a key evicted was not used since the hand last
// passed it, and since then the hand passed every other key held
// throughout (so a key used since the hand last passed it is not evicted
// before every other key has been passed once more).
type clockModel struct {
	t        *testing.T
	seq      int
	marked   map[string]bool // used since its last pass (by the model's account)
	passedAt map[string]int  // seq of its last pass (0: none)
	since    map[string]int  // seq when it was created (held since)
	bad      []string
}

func newClockModel(t *testing.T) *clockModel {
	return &clockModel{t: t, marked: map[string]bool{}, passedAt: map[string]int{}, since: map[string]int{}}
}

// used records a use of key after a request: a key not held is created
// unmarked (its creation is no use: a key used once goes before any key
// used again since the hand last passed it), one held is marked.
func (m *clockModel) used(key string) {
	m.seq++
	if _, held := m.since[key]; !held {
		m.since[key] = m.seq
		m.marked[key] = false
		return
	}
	m.marked[key] = true
}

func (m *clockModel) passed(key string) {
	m.seq++
	m.passedAt[key] = m.seq
	m.marked[key] = false
}

func (m *clockModel) evicted(key string, _ int64) {
	m.seq++
	_, held := m.since[key]
	switch {
	case !held:
		m.bad = append(m.bad, fmt.Sprintf("evicted %s, which is not held", key))
	case m.marked[key]:
		m.bad = append(m.bad, fmt.Sprintf("evicted %s, used since the hand last passed it", key))
	}
	for other, from := range m.since {
		if other != key && from < m.passedAt[key] && m.passedAt[other] < m.passedAt[key] {
			m.bad = append(m.bad, fmt.Sprintf("evicted %s (passed at %d) before the hand passed %s (held since %d, passed at %d)",
				key, m.passedAt[key], other, from, m.passedAt[other]))
		}
	}
	delete(m.since, key)
	delete(m.marked, key)
	delete(m.passedAt, key)
}

func (m *clockModel) check() {
	m.t.Helper()
	if len(m.bad) > 0 {
		m.t.Fatal(m.bad[0])
	}
}

// Idle keys (state equal to a new key's) are evicted before any key with
// state, even one used longer ago.
func TestIdleKeysGoFirst(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(3))
	day := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 100, Window: 24 * time.Hour}}
	fast, _ := store.NewBucketSpec(bucket.Limit{Capacity: 10, Rate: 10})
	take1(t, s, store.Item{Key: "old-with-state", Spec: day, Cost: 1})
	c.Advance(time.Second)
	take1(t, s, store.Item{Key: "young-idle", Spec: fast, Cost: 1}) // full again in 100 ms
	c.Advance(time.Second)
	take1(t, s, store.Item{Key: "young-with-state", Spec: day, Cost: 1})
	c.Advance(time.Second)
	take1(t, s, store.Item{Key: "new", Spec: day, Cost: 1})
	if idle, lru := s.EvictionsByReason(); idle != 1 || lru != 0 {
		t.Fatalf("%d idle, %d lru evictions; want the idle key evicted", idle, lru)
	}
	peek := []store.Item{{Key: "old-with-state", Spec: day}}
	s.Take(context.Background(), peek)
	if peek[0].Decision.Remaining != 99 {
		t.Fatalf("the key with state lost it: %+v", peek[0].Decision)
	}
	take1(t, s, store.Item{Key: "newer", Spec: day, Cost: 1}) // no key idle: one with state goes (TestClockEvictionOrder: which)
	if idle, lru := s.EvictionsByReason(); idle != 1 || lru != 1 || s.Stats().Keys != 3 {
		t.Fatalf("%d idle, %d lru evictions, %+v; want one key with state evicted", idle, lru, s.Stats())
	}
}

// A request refused by one of its limits creates no key and evicts
// nothing, whatever the order of its items: with a tenant limit in front of
// per-user keys, a flood the tenant limit refuses cannot push anyone out.
// (Before, the new user key's missing room was found first: the request
// was answered store_full, or evicted a key, before its refusal was seen.)
func TestRefusedRequestEvictsNothing(t *testing.T) {
	t.Parallel()
	for _, refuseFull := range []bool{false, true} {
		c := sluice.NewManualClock(storetest.Epoch)
		opts := []memstore.Option{memstore.WithClock(c), memstore.WithMaxKeys(10)}
		if refuseFull {
			opts = append(opts, memstore.WithRefuseWhenFull())
		}
		s := memstore.New(opts...)
		day := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 100, Window: 24 * time.Hour}}
		tenant, _ := store.NewBucketSpec(bucket.Limit{Capacity: 3, Rate: 0.001})
		ctx := context.Background()
		admitted, refused := 0, 0
		for i := range 50 {
			c.Advance(time.Millisecond)
			items := []store.Item{{Key: fmt.Sprint("user:", i), Spec: day, Cost: 1}, {Key: "tenant:flood", Spec: tenant, Cost: 1}}
			if i%2 == 1 {
				items[0], items[1] = items[1], items[0]
			}
			r, err := s.Take(ctx, items)
			switch {
			case err != nil && !(refuseFull && errors.Is(err, store.ErrFull) && i < 3):
				t.Fatalf("refuseFull %v, request %d: %v", refuseFull, i, err)
			case r.Allowed:
				admitted++
			default:
				refused++
			}
			if i == 2 { // the tenant's 3 tokens are gone: fill the rest of the cap
				for j := range 6 {
					take1(t, s, store.Item{Key: fmt.Sprint("other:", j), Spec: day, Cost: 1})
				}
			}
		}
		if idle, lru := s.EvictionsByReason(); admitted != 3 || refused != 47 || idle+lru != 0 || s.Stats().Keys != 10 {
			t.Fatalf("refuseFull %v: %d admitted, %d refused, %d+%d evictions, %+v", refuseFull, admitted, refused, idle, lru, s.Stats())
		}
	}
}

// On a random trace of single and multi-item requests at the cap (keys
// that never become idle in it), every eviction keeps the CLOCK order
// (clockModel: a use is any request that found the key, admitted or
// refused).
func TestClockEvictionOrder(t *testing.T) {
	t.Parallel()
	c := sluice.NewManualClock(storetest.Epoch)
	m := newClockModel(t)
	held := map[string]bool{}
	step, evictions := 0, 0
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(50), memstore.OnPass(m.passed), memstore.OnLRU(func(k string, d int64) {
		evictions++
		delete(held, k)
		m.evicted(k, d)
	}))
	slow, _ := store.NewBucketSpec(bucket.Limit{Capacity: 4, Rate: 1e-6})
	win := &store.Spec{Kind: store.FixedWindow, Window: window.Limit{Limit: 3, Window: 1000 * time.Hour}}
	specs := []*store.Spec{slow, win}
	rng := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	for step = range 20000 {
		c.Advance(time.Duration(1 + rng.IntN(1000)))
		n := 1 + rng.IntN(3)
		var keys []string
		for len(keys) < n {
			k := fmt.Sprint(rng.IntN(150))
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		items := make([]store.Item, n)
		for i, k := range keys {
			items[i] = store.Item{Key: k, Spec: specs[len(k)%2], Cost: 1}
		}
		r, err := s.Take(ctx, items)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for _, it := range items {
			// A request uses every key it found; an admitted one creates
			// the others.
			if held[it.Key] || r.Allowed {
				held[it.Key] = true
				m.used(it.Key)
			}
		}
		if len(m.bad) > 0 {
			t.Fatalf("step %d: %s", step, m.bad[0])
		}
		if k := s.Stats().Keys; k != int64(len(held)) {
			t.Fatalf("step %d: the store holds %d keys, the model %d", step, k, len(held))
		}
	}
	if evictions < 1000 {
		t.Fatalf("only %d LRU evictions: the trace proves little", evictions)
	}
}

// The bound of docs/behaviour.md 4.3: a token bucket (B, r) evicted with
// state k times during an interval of length T is admitted at most
// (k+1)·B + r·T in it (B + r·T, its own bound, when k = 0). A random trace
// of a few busy keys and a flood that pushes them out checks every
// interval between two admissions of every key; and the evictions do give
// extra: some interval exceeds B + r·T.
func TestLRUEvictionGivesAtMostOneCapacity(t *testing.T) {
	t.Parallel()
	const capB, rate = 5, 2.0 // tokens, per second
	c := sluice.NewManualClock(storetest.Epoch)
	type adm struct {
		at   time.Duration
		cost int64
	}
	admitted := map[string][]adm{}
	evictedAt := map[string][]time.Duration{}
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(30), memstore.OnLRU(func(k string, d int64) {
		evictedAt[k] = append(evictedAt[k], time.Duration(d))
	}))
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: capB, Rate: rate})
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for i := range 30000 {
		c.Advance(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
		key := fmt.Sprint("busy:", rng.IntN(5))
		if rng.IntN(3) > 0 {
			key = fmt.Sprint("flood:", i) // a new key: at the cap, it evicts the LRU
		}
		items := []store.Item{{Key: key, Spec: sp, Cost: 1 + rng.Int64N(capB)}}
		r, err := s.Take(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed && key[0] == 'b' {
			admitted[key] = append(admitted[key], adm{c.Now().Sub(storetest.Epoch), items[0].Cost})
		}
	}
	// (Which busy key an eviction picks depends on the shards the
	// process's hash seed puts the keys in: most are evicted, not always
	// all; a key never evicted is held to B + r·T itself.)
	beyond, evicted := 0, 0
	for key, as := range admitted {
		if len(evictedAt[key]) > 0 {
			evicted++
		}
		for i := range as {
			sum := int64(0)
			for j := i; j < len(as); j++ {
				sum += as[j].cost
				span := as[j].at - as[i].at
				k := 0
				for _, e := range evictedAt[key] {
					if e > as[i].at && e <= as[j].at {
						k++
					}
				}
				own := float64(capB) + rate*span.Seconds()
				if float64(sum) > own+float64(k*capB)+1e-9 {
					t.Fatalf("%s: %d admitted in %v with %d evictions, bound %.3f", key, sum, span, k, own+float64(k*capB))
				}
				if float64(sum) > own+1e-9 {
					beyond++
				}
			}
		}
	}
	if evicted < 3 {
		t.Fatalf("%d of the busy keys were evicted: the trace proves little", evicted)
	}
	if beyond == 0 {
		t.Fatal("no interval went beyond B + r·T: the evictions gave nothing, the test proves little")
	}
	_, lru := s.EvictionsByReason()
	t.Logf("%d LRU evictions, %d of the busy keys evicted; %d intervals beyond B + r·T (within the bound)", lru, evicted, beyond)
}

// Many goroutines inventing buckets and windows at the cap, in requests of
// one to three items, with adjustments: none is ever refused full (the
// room an eviction makes goes to the request that made it), the store
// never holds more than the cap, and its count stays true.
func TestLRUUnderConcurrency(t *testing.T) {
	t.Parallel()
	const capN = 40
	c := sluice.NewManualClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(capN))
	bk, _ := store.NewBucketSpec(bucket.Limit{Capacity: 4, Rate: 0.01})
	win := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 4, Window: time.Hour}}
	specs := []*store.Spec{bk, win}
	ctx := context.Background()
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range 3000 {
				if rng.IntN(8) == 0 {
					c.Advance(time.Millisecond)
				}
				items := make([]store.Item, 1+rng.IntN(3))
				for i := range items {
					k := rng.IntN(2000)
					items[i] = store.Item{Key: fmt.Sprint(k, "/", i), Spec: specs[k%2], Cost: 1}
				}
				r, err := s.Take(ctx, items)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
					if rng.IntN(4) == 0 {
						s.Adjust(ctx, []store.Adjustment{{Key: items[0].Key, Spec: items[0].Spec, Delta: 1}})
					}
				}
				if k := s.Stats().Keys; k > capN {
					t.Errorf("%d keys held, cap %d", k, capN)
					return
				}
			}
		})
	}
	wg.Wait()
	_, lru := s.EvictionsByReason()
	if st := s.Stats(); st.Keys != s.HeldKeys() || lru == 0 {
		t.Fatalf("count %d, held %d, %d LRU evictions", st.Keys, s.HeldKeys(), lru)
	}
	t.Logf("%d admitted, %d LRU evictions", admitted.Load(), lru)
}

// A key used again survives a flood of keys used once: a new key is
// created unmarked, so the hand passes (and spares) only the keys used
// again — here one — before it evicts one of the flood's own. With
// creation counted as a use, the first eviction of a full table of new
// keys went round every key and evicted whichever came first, the key in
// use among them (the limiter's gated-flood test saw it in one run of
// five: it depends on the process's hash seed).
func TestOneRequestKeysGoFirst(t *testing.T) {
	t.Parallel()
	hot, _ := store.NewBucketSpec(bucket.Limit{Capacity: 1000, Rate: 0.001}) // (never full again: never idle)
	day := &store.Spec{Kind: store.SlidingWindow, Window: window.Limit{Limit: 100, Window: 24 * time.Hour}}
	c := sluice.NewManualClock(storetest.Epoch)
	passes, evictions := 0, 0
	s := memstore.New(memstore.WithClock(c), memstore.WithMaxKeys(10),
		memstore.OnPass(func(string) { passes++ }),
		memstore.OnLRU(func(k string, _ int64) {
			evictions++
			if k == "tenant:flood" || passes > 1 {
				t.Errorf("eviction %d: %s after %d passes; want a key used once, after passing at most the one key used again", evictions, k, passes)
			}
			passes = 0
		}))
	for i := range 200 {
		c.Advance(time.Millisecond)
		take1(t, s, store.Item{Key: "tenant:flood", Spec: hot, Cost: 1})
		take1(t, s, store.Item{Key: fmt.Sprint("user:", i), Spec: day, Cost: 1})
	}
	if evictions != 191 {
		t.Fatalf("%d evictions, want 191 (200 users and the tenant for 10 places)", evictions)
	}
}
