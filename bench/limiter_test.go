package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

// The keyed engine against the usual ways of keying a limiter: an
// x/time/rate Limiter per key in a sync.Map, and go-limiter's memorystore.
// Limits never run out (1e9 tokens/s), so every decision admits. With 3
// limits, the peers call 3 limiters one after another (not all-or-nothing);
// sluice takes from 3 buckets at once, atomically.

const policy1 = `
limits:
  - name: tenant
    key: "tenant:{tenant}"
    capacity: 1000000000
    refill_per_second: 1000000000
`

const policy3 = policy1 + `
  - name: global
    key: "global"
    capacity: 1000000000
    refill_per_second: 1000000000
  - name: user
    key: "user:{user}"
    capacity: 1000000000
    refill_per_second: 1000000000
`

type keyed interface {
	// check admits one request of tenant i (and, with 3 limits, user i and
	// the global limit).
	check(i int) bool
}

type sluiceKeyed struct {
	l      *limiter.Limiter
	tenant []string
	user   []string
	three  bool
	pool   sync.Pool // *caller
}

// caller is what one goroutine reuses: its descriptor map and its result
// (CheckInto rewrites it, allocating nothing).
type caller struct {
	desc map[string]string
	res  limiter.Result
}

func (s *sluiceKeyed) check(i int) bool {
	c := s.pool.Get().(*caller)
	c.desc["tenant"] = s.tenant[i]
	if s.three {
		c.desc["user"] = s.user[i]
	}
	err := s.l.CheckInto(context.Background(), limiter.Request{Descriptors: c.desc}, &c.res)
	ok := err == nil && c.res.Allowed
	s.pool.Put(c)
	return ok
}

type xrateKeyed struct {
	m      sync.Map
	tenant []string
	user   []string
	three  bool
}

func (x *xrateKeyed) get(k string) *rate.Limiter {
	if v, ok := x.m.Load(k); ok {
		return v.(*rate.Limiter)
	}
	v, _ := x.m.LoadOrStore(k, rate.NewLimiter(1e9, 1e9))
	return v.(*rate.Limiter)
}

func (x *xrateKeyed) check(i int) bool {
	ok := x.get("tenant:" + x.tenant[i]).Allow()
	if x.three {
		ok = x.get("global").Allow() && ok
		ok = x.get("user:"+x.user[i]).Allow() && ok
	}
	return ok
}

type goLimiterKeyed struct {
	s      golimiter.Store
	tenant []string
	user   []string
	three  bool
}

func (g *goLimiterKeyed) check(i int) bool {
	ctx := context.Background()
	_, _, _, ok, _ := g.s.Take(ctx, "tenant:"+g.tenant[i])
	if g.three {
		_, _, _, ok2, _ := g.s.Take(ctx, "global")
		_, _, _, ok3, _ := g.s.Take(ctx, "user:"+g.user[i])
		ok = ok && ok2 && ok3
	}
	return ok
}

// floorKeyed is the least any keyed limiter called with a descriptor map
// can do: look the descriptor up, find the key's state in a sync.Map (the
// descriptor value itself as key: no key string is built), read the
// monotonic clock and CAS one integer (GCRA at 1 token/ns, burst 1e9). No
// exact rates, no status, no all-or-nothing, no metrics: a floor to
// measure the peers against, not a limiter.
type floorKeyed struct {
	m      [3]sync.Map
	t0     time.Time
	tenant []string
	user   []string
	three  bool
	pool   sync.Pool // map[string]string
}

func (f *floorKeyed) allow(m *sync.Map, k string) bool {
	v, ok := m.Load(k)
	if !ok {
		v, _ = m.LoadOrStore(k, new(atomic.Int64))
	}
	a := v.(*atomic.Int64)
	now := int64(time.Since(f.t0))
	for {
		old := a.Load()
		tat := max(old, now) + 1
		if tat-now > 1e9 {
			return false
		}
		if a.CompareAndSwap(old, tat) {
			return true
		}
	}
}

func (f *floorKeyed) check(i int) bool {
	d := f.pool.Get().(map[string]string)
	d["tenant"] = f.tenant[i]
	if f.three {
		d["user"] = f.user[i]
	}
	ok := f.allow(&f.m[0], d["tenant"])
	if f.three {
		ok = f.allow(&f.m[1], "global") && ok
		ok = f.allow(&f.m[2], d["user"]) && ok
	}
	f.pool.Put(d)
	return ok
}

var names = map[int][]string{}

func keyNames(n int) []string {
	if k, ok := names[n]; ok {
		return k
	}
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("%07d", i)
	}
	names[n] = k
	return k
}

func newKeyed(b *testing.B, impl string, limits, keys int) keyed {
	tenant, user := keyNames(keys), keyNames(keys)
	three := limits == 3
	switch impl {
	case "sluice":
		src := policy1
		if three {
			src = policy3
		}
		p, err := policy.Parse([]byte(src))
		if err != nil {
			b.Fatal(err)
		}
		l, err := limiter.New(p, memstore.New(memstore.WithMaxKeys(4*keys)))
		if err != nil {
			b.Fatal(err)
		}
		s := &sluiceKeyed{l: l, tenant: tenant, user: user, three: three}
		s.pool.New = func() any { return &caller{desc: map[string]string{}} }
		return s
	case "xrate":
		return &xrateKeyed{tenant: tenant, user: user, three: three}
	case "floor":
		f := &floorKeyed{t0: time.Now(), tenant: tenant, user: user, three: three}
		f.pool.New = func() any { return map[string]string{} }
		return f
	default:
		s, err := memorystore.New(&memorystore.Config{Tokens: 1e9, Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(context.Background()) })
		return &goLimiterKeyed{s: s, tenant: tenant, user: user, three: three}
	}
}

// BenchmarkCheck: one decision per op, keys chosen round-robin among keys
// distinct tenants (and users); single goroutine and RunParallel. impl=floor
// is not a limiter (see floorKeyed).
func BenchmarkCheck(b *testing.B) {
	for _, limits := range []int{1, 3} {
		for _, keys := range []int{1, 1_000_000} {
			for _, par := range []bool{false, true} {
				mode := "serial"
				if par {
					mode = "parallel"
				}
				for _, impl := range []string{"sluice", "xrate", "golimiter", "floor"} {
					b.Run(fmt.Sprintf("limits=%d/keys=%d/%s/impl=%s", limits, keys, mode, impl), func(b *testing.B) {
						k := newKeyed(b, impl, limits, keys)
						for i := range min(keys, 1_000_000) { // warm: every key exists
							k.check(i)
						}
						b.ReportAllocs()
						b.ResetTimer()
						if !par {
							i, refused := 0, 0
							for b.Loop() {
								if !k.check(i) {
									refused++ // go-limiter refuses some with 3 limits: counted, not hidden
								}
								if i++; i == keys {
									i = 0
								}
							}
							b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
							return
						}
						var next atomic.Int64
						b.RunParallel(func(pb *testing.PB) {
							i := int(next.Add(7919)) % keys
							for pb.Next() {
								k.check(i)
								if i++; i == keys {
									i = 0
								}
							}
						})
					})
				}
			}
		}
	}
}
