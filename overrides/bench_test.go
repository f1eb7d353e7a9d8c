package overrides_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

// bigSet is a Set with exact overrides on tenant_api's tenant, and
// prefix ones ("p0001_*").
func bigSet(tb testing.TB, exact, prefix int) *overrides.Set {
	s := overrides.NewSet(mustPolicy(tb, testPolicy))
	now := time.Now()
	for i := range exact {
		o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": fmt.Sprintf("tenant-%07d", i)},
			Params: overrides.Params{Capacity: int64(100 + i%4)}, Note: "tier"}
		o.Stamp(now, time.Time{})
		if err := s.Put(&o); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range prefix {
		o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": fmt.Sprintf("p%04d_*", i)},
			Params: overrides.Params{Capacity: 500}}
		o.Stamp(now, time.Time{})
		if err := s.Put(&o); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// BenchmarkResolve: go test -run '^$' -bench Resolve ./overrides/
func BenchmarkResolve(b *testing.B) {
	now := time.Now()
	for _, c := range []struct {
		name           string
		exact, prefix  int
		tenant         string
		wantOverridden bool
	}{
		{"none", 0, 0, "tenant-0000042", false},
		{"100kExact1kPrefix/exact", 100_000, 1_000, "tenant-0000042", true},
		{"100kExact1kPrefix/prefix", 100_000, 1_000, "p0042_customer", true},
		{"100kExact1kPrefix/miss", 100_000, 1_000, "other-tenant", false},
	} {
		s := bigSet(b, c.exact, c.prefix)
		ix := s.Index("tenant_api")
		desc := map[string]string{"tenant": c.tenant, "user": "u1", "route": "/x"}
		if (ix.Resolve(desc, now) != nil) != c.wantOverridden {
			b.Fatalf("%s: overridden %v", c.name, !c.wantOverridden)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ix.Resolve(desc, now)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if r := ix.Resolve(desc, now); r != nil {
						r.Hit(now)
					}
				}
			})
		})
	}
}

// TestBytesPerOverride reports the heap a Set holds per override (100,000
// exact overrides of one limit with four distinct parameter sets and a
// note: go test -run BytesPerOverride -v ./overrides/).
func TestBytesPerOverride(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100,000 overrides")
	}
	const n = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := bigSet(t, n, 0)
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.1f B/override (%d exact overrides of one limit, keys of 14 bytes)", per, n)
	runtime.KeepAlive(s)
}

// BenchmarkPut: one replacement and one new override into a Set holding
// 100,000 (the cost of a change does not grow with the Set).
func BenchmarkPut(b *testing.B) {
	s := bigSet(b, 100_000, 1_000)
	now := time.Now()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": fmt.Sprintf("new-%d", i%1000)},
			Params: overrides.Params{Capacity: 100}}
		o.Stamp(now, time.Time{})
		if err := s.Put(&o); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
