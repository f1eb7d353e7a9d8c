package bench

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/bucket"
)

// casGCRA is the floor: the least a lock-free limiter can do per decision,
// one monotonic clock read and one compare-and-swap on integer-nanosecond
// GCRA state, with none of sluice's exactness or validation.
type casGCRA struct {
	start    time.Time
	tat      atomic.Int64
	interval int64 // ns per token
	tau      int64 // interval * burst
}

func newCAS(perSecond float64, burst int64) *casGCRA {
	iv := int64(1e9 / perSecond)
	return &casGCRA{start: time.Now(), interval: iv, tau: iv * burst}
}

func (c *casGCRA) Allow() bool {
	now := int64(time.Since(c.start))
	for {
		tat := c.tat.Load()
		nt := max(tat, now) + c.interval
		if nt-now > c.tau {
			return false
		}
		if c.tat.CompareAndSwap(tat, nt) {
			return true
		}
	}
}

type allower interface{ allow() bool }

type sluiceB struct{ b *bucket.Bucket }

func (s sluiceB) allow() bool { d, _ := s.b.Allow(1); return d.Allowed }

type xrateB struct{ l *rate.Limiter }

func (x xrateB) allow() bool { return x.l.Allow() }

type casB struct{ c *casGCRA }

func (c casB) allow() bool { return c.c.Allow() }

func impls(b *testing.B, perSecond float64, burst int64) map[string]allower {
	sb, err := bucket.New(bucket.Limit{Capacity: burst, Rate: perSecond})
	if err != nil {
		b.Fatal(err)
	}
	return map[string]allower{
		"sluice": sluiceB{sb},
		"xrate":  xrateB{rate.NewLimiter(rate.Limit(perSecond), int(burst))},
		"cas":    casB{newCAS(perSecond, burst)},
	}
}

var order = []string{"sluice", "xrate", "cas"}

// BenchmarkAllow: one goroutine. "admit" never runs out (1e9/s, burst 1e9);
// "deny" has one token a second, so all but the first are refused. The
// "_odd" variants use rates whose exact ratio has no power-of-two part
// (999,999,937/s and 0.7/s), so sluice takes its general division path.
func BenchmarkAllow(b *testing.B) {
	for _, mode := range []struct {
		name  string
		rate  float64
		burst int64
		want  bool
	}{{"admit", 1e9, 1e9, true}, {"deny", 1, 1, false}, {"admit_odd", 999_999_937, 1e9, true}, {"deny_odd", 0.7, 1, false}} {
		for _, name := range order {
			b.Run("mode="+mode.name+"/impl="+name, func(b *testing.B) {
				a := impls(b, mode.rate, mode.burst)[name]
				a.allow()
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					if a.allow() == mode.want {
						n++
					}
				}
				if n < b.N*9/10 {
					b.Fatalf("%s: %d of %d decisions were %v", name, n, b.N, mode.want)
				}
			})
		}
	}
}

// BenchmarkAllowParallel: all goroutines (GOMAXPROCS) on one bucket that
// admits everything.
func BenchmarkAllowParallel(b *testing.B) {
	for _, name := range order {
		b.Run("impl="+name, func(b *testing.B) {
			a := impls(b, 1e9, 1e9)[name]
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a.allow()
				}
			})
		})
	}
}

// BenchmarkReserveCancel: book one token and give it back.
func BenchmarkReserveCancel(b *testing.B) {
	b.Run("impl=sluice", func(b *testing.B) {
		sb, _ := bucket.New(bucket.Limit{Capacity: 1000, Rate: 1})
		b.ReportAllocs()
		for b.Loop() {
			r, err := sb.Reserve(1, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			r.Cancel()
		}
	})
	b.Run("impl=xrate", func(b *testing.B) {
		l := rate.NewLimiter(1, 1000)
		b.ReportAllocs()
		for b.Loop() {
			r := l.Reserve()
			if !r.OK() {
				b.Fatal("not ok")
			}
			r.Cancel()
		}
	})
}
