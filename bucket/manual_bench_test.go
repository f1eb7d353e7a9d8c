// Allow and Deny on a manual clock: the decision itself, no clock read
// (BENCHMARKS.md "The bucket's own instructions").

package bucket

import (
	"testing"
	"time"
)

type benchClock struct{ t time.Time }

func (c *benchClock) Now() time.Time { return c.t }

// BenchmarkAllowManual: an admission per op (1e9 tokens/s, burst 1e9), the
// clock 30 ns later each time.
func BenchmarkAllowManual(b *testing.B) {
	clk := &benchClock{t: time.Unix(1_700_000_000, 0)}
	bk, _ := New(Limit{Capacity: 1e9, Rate: 1e9}, WithClock(clk))
	for b.Loop() {
		clk.t = clk.t.Add(30)
		if d, _ := bk.Allow(1); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkDenyManual: a refusal per op (1 token/s, burst 1, spent), the
// clock 30 ns later each time.
func BenchmarkDenyManual(b *testing.B) {
	clk := &benchClock{t: time.Unix(1_700_000_000, 0)}
	bk, _ := New(Limit{Capacity: 1, Rate: 1}, WithClock(clk))
	bk.Allow(1)
	for b.Loop() {
		clk.t = clk.t.Add(30)
		if d, _ := bk.Allow(1); d.Allowed {
			b.Fatal("admitted")
		}
	}
}
