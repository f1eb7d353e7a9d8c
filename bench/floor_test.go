package bench

// The parts of a keyed check on one limit and one key, each measured
// alone (bench/instructions.sh 'KeyedParts/'): the floor of a check that
// keeps what sluice's must do — look the descriptor up and render the key,
// read the clock, find the key's state under a lock, decide it exactly,
// write a status and count the decision — against BenchmarkCheck's rows
// (BENCHMARKS.md, "A keyed check near the floor").

import (
	"context"
	"hash/maphash"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

var (
	sinkBool   bool
	sinkInt    int64
	sinkUint   uint64
	sinkStatus limiter.LimitStatus
	sinkString string
)

func BenchmarkKeyedParts(b *testing.B) {
	tenant := "0000000"
	// loop: b.Loop alone, which every part below includes once.
	b.Run("part=loop", func(b *testing.B) {
		for b.Loop() {
			sinkInt++
		}
	})
	// harness: what BenchmarkCheck's sluice row does around CheckInto (a
	// pooled caller, its descriptor written), with no check.
	b.Run("part=harness", func(b *testing.B) {
		var pool sync.Pool
		pool.New = func() any { return &caller{desc: map[string]string{}} }
		for b.Loop() {
			c := pool.Get().(*caller)
			c.desc["tenant"] = tenant
			sinkBool = c.res.Allowed
			pool.Put(c)
		}
	})
	// key: the descriptor looked up and the store key rendered ("tenant:"
	// name prefix, "tenant:" literal, the value escaped) into a reused
	// buffer.
	b.Run("part=key", func(b *testing.B) {
		desc := map[string]string{"tenant": tenant}
		esc := keyesc.NewSet(":{}")
		buf := make([]byte, 0, 64)
		for b.Loop() {
			v, ok := desc["tenant"]
			buf = esc.Append(append(buf[:0], "tenant:tenant:"...), v)
			sinkBool = ok && len(buf) > 0
		}
	})
	b.Run("part=clock", func(b *testing.B) {
		t0 := time.Now()
		for b.Loop() {
			sinkInt = int64(time.Since(t0))
		}
	})
	b.Run("part=hash", func(b *testing.B) {
		seed, key := maphash.MakeSeed(), "tenant:tenant:"+tenant
		for b.Loop() {
			sinkUint = maphash.String(seed, key)
		}
	})
	b.Run("part=lock", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			sinkInt++
			mu.Unlock()
		}
	})
	// bucket: the exact decision alone (the state brought to the time,
	// then the step), 100 ns apart, as memstore decides a held key.
	b.Run("part=bucket", func(b *testing.B) {
		sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 1e9, Rate: 1e9})
		if err != nil {
			b.Fatal(err)
		}
		p := &sp.Bucket
		var tat, origin, d int64
		var phase uint64
		for b.Loop() {
			d += 100
			t, o, ph := store.BucketState(p, tat, origin, phase, true, d)
			nt, dec := p.Step(t, bucket.Instant{Elapsed: d - o, Phase: ph}, 1)
			tat, origin, phase = nt, o, ph
			sinkBool = dec.Allowed
		}
	})
	// store: memstore deciding one held key as the limiter's fast path
	// asks it to (TakePlainHeldAt: clock, hash, lock, table probe and key
	// compare, the exact step, the idle sweep's count).
	b.Run("part=store", func(b *testing.B) {
		sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 1e9, Rate: 1e9})
		if err != nil {
			b.Fatal(err)
		}
		st := memstore.New()
		key := "tenant:tenant:" + tenant
		items := []store.Item{{Key: key, Spec: sp, Cost: 1}}
		if _, err := st.TakeBorrowed(context.Background(), items); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			items[0].Key = key
			allowed, ok := st.TakePlainHeldAt(items, nil)
			sinkBool = ok && allowed
		}
	})
	// golimiter-key and golimiter-take: BenchmarkCheck's go-limiter row in
	// two, its caller's key ("tenant:" and the value, a string allocated
	// per call) and memorystore's Take on a key made once (its map under
	// a read lock, its clock, its bucket's integer step under a lock).
	b.Run("part=golimiter-key", func(b *testing.B) {
		for b.Loop() {
			sinkString = "tenant:" + tenant
		}
	})
	b.Run("part=golimiter-take", func(b *testing.B) {
		s, err := memorystore.New(&memorystore.Config{Tokens: 1e9, Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(context.Background()) })
		key := "tenant:" + tenant
		ctx := context.Background()
		for b.Loop() {
			_, _, _, ok, _ := s.Take(ctx, key)
			sinkBool = ok
		}
	})
	// status: a limit's status written and its decision counted.
	b.Run("part=status", func(b *testing.B) {
		ctr := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
		key := "tenant:" + tenant
		for b.Loop() {
			st := &sinkStatus
			st.Name, st.Key, st.Algorithm, st.Capacity, st.RefillPerSecond = "tenant", key, "token_bucket", 1e9, 1e9
			st.AdaptiveRefill, st.TokensRemaining, st.TokenCost, st.Allowed = 0, 999_999_999, 1, true
			st.Shadow, st.ShadowRefused, st.Denied, st.NearLimit, st.Priority, st.FairShare = false, false, false, false, "", limiter.ShareStatus{}
			st.RetryAfter, st.BlockFor, st.ResetAfter, st.Period, st.Window, st.Override = 0, 0, 1, "", 0, nil
			ctr.Inc()
		}
	})
}
