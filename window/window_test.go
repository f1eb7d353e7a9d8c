package window_test

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/window"
)

var t0 = time.Unix(1_800_000_000, 0) // aligned to every whole-second window

func sliding(t *testing.T, l window.Limit) (*window.Sliding, *sluice.ManualClock) {
	t.Helper()
	c := sluice.NewManualClock(t0)
	s, err := window.NewSliding(l, window.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestSlidingEstimate(t *testing.T) {
	t.Parallel()
	s, c := sliding(t, window.Limit{Limit: 10, Window: time.Second})
	for i := range 10 {
		if d, _ := s.Allow(1); !d.Allowed || d.Remaining != int64(9-i) {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	d, _ := s.Allow(1)
	// Next window: previous = 10 decays; 1 fits once 10*(1-e) <= 9, e = 0.1 s.
	if d.Allowed || d.RetryAfter != 1100*time.Millisecond || d.ResetAfter != 2*time.Second {
		t.Fatalf("11th: %+v", d)
	}
	c.Advance(1100*time.Millisecond - 1)
	if d, _ := s.Allow(1); d.Allowed {
		t.Fatalf("1 ns early: %+v", d)
	}
	c.Advance(1)
	if d, _ := s.Allow(1); !d.Allowed {
		t.Fatalf("at RetryAfter: %+v", d)
	}
	// 25% into a window after a full one: estimate 7.5 + current.
	s2, c2 := sliding(t, window.Limit{Limit: 10, Window: time.Second})
	s2.Allow(10)
	c2.Advance(1250 * time.Millisecond)
	got := 0
	for range 5 {
		if d, _ := s2.Allow(1); d.Allowed {
			got++
		}
	}
	if got != 2 {
		t.Fatalf("admitted %d at 25%%, want 2 (7.5 + 2 <= 10 < 7.5 + 3)", got)
	}
	// Two windows later everything is forgotten.
	c2.Advance(2 * time.Second)
	if d, _ := s2.Allow(10); !d.Allowed {
		t.Fatalf("after two windows: %+v", d)
	}
}

// The fixed window admits twice its limit across a boundary; the sliding
// window does not.
func TestFixedBoundaryDoubleBurst(t *testing.T) {
	t.Parallel()
	l := window.Limit{Limit: 10, Window: time.Second}
	c := sluice.NewManualClock(t0.Add(999 * time.Millisecond))
	f, _ := window.NewFixed(l, window.WithClock(c))
	s, _ := window.NewSliding(l, window.WithClock(c))
	var fixed, slid int
	for range 2 {
		for range 10 {
			if d, _ := f.Allow(1); d.Allowed {
				fixed++
			}
			if d, _ := s.Allow(1); d.Allowed {
				slid++
			}
		}
		c.Advance(time.Millisecond)
	}
	if fixed != 20 || slid != 10 {
		t.Fatalf("in 2 ms: fixed %d (want 20), sliding %d (want 10)", fixed, slid)
	}
	d, _ := f.Allow(1)
	if d.Allowed || d.RetryAfter != 999*time.Millisecond || d.Remaining != 0 {
		t.Fatalf("fixed after burst: %+v", d)
	}
}

// model is the estimate of docs/behaviour.md section 2, in rationals.
func modelAdmits(l window.Limit, st window.SlidingState, now int64, cost int64) bool {
	w := int64(l.Window)
	idx := now / w
	e := now % w
	prev, cur := st.Prev, st.Curr
	switch {
	case idx == st.Index+1:
		prev, cur = cur, 0
	case idx > st.Index+1:
		prev, cur = 0, 0
	}
	est := new(big.Rat).SetFrac64(w-e, w)
	est.Mul(est, new(big.Rat).SetInt64(prev))
	est.Add(est, new(big.Rat).SetInt64(cur+cost))
	return est.Cmp(new(big.Rat).SetInt64(l.Limit)) <= 0
}

func TestSlidingAgainstModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		l := window.Limit{Limit: rng.Int64N(1000) + 1, Window: time.Duration(rng.Int64N(int64(time.Hour))) + 1}
		st := window.SlidingState{}
		now := int64(1_800_000_000) * int64(time.Second)
		for range 300 {
			now += rng.Int64N(int64(l.Window)/3 + 1)
			cost := rng.Int64N(l.Limit + 1)
			want := modelAdmits(l, st, now, cost)
			nst, d := l.Sliding(st, now, cost)
			if d.Allowed != want {
				t.Fatalf("%v state %+v now %d cost %d: allowed %v, model %v", l, st, now, cost, d.Allowed, want)
			}
			if !d.Allowed {
				// Exactly RetryAfter later it is admitted, 1 ns earlier not.
				if _, ok := l.Sliding(st, now+int64(d.RetryAfter), cost); !ok.Allowed {
					t.Fatalf("%v: not admitted after RetryAfter %v", l, d.RetryAfter)
				}
				if _, early := l.Sliding(st, now+int64(d.RetryAfter)-1, cost); early.Allowed {
					t.Fatalf("%v: RetryAfter %v is not the least wait", l, d.RetryAfter)
				}
			}
			st = nst
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	for _, l := range []window.Limit{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}} {
		if _, err := window.NewSliding(l); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("NewSliding(%v): %v", l, err)
		}
		if _, err := window.NewFixed(l); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("NewFixed(%v): %v", l, err)
		}
	}
	s, _ := sliding(t, window.Limit{Limit: 10, Window: time.Second})
	if _, err := s.Allow(11); !errors.Is(err, sluice.ErrCostExceedsCapacity) || err.Error() != "sluice: cost 11 exceeds capacity 10" {
		t.Fatalf("cost 11: %v", err)
	}
	if _, err := s.Allow(-1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("cost -1: %v", err)
	}
	if d, _ := s.Allow(0); !d.Allowed || d.Remaining != 10 {
		t.Fatalf("peek: %+v", d)
	}
}

func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	s, c := sliding(t, window.Limit{Limit: 3, Window: time.Second})
	c.Advance(5 * time.Second)
	s.Allow(3)
	c.Advance(-3 * time.Second) // an earlier window: counts as the latest seen
	if d, _ := s.Allow(1); d.Allowed {
		t.Fatalf("stepping back reset the window: %+v", d)
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	s, _ := sliding(t, window.Limit{Limit: 500, Window: time.Minute})
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if d, _ := s.Allow(1); d.Allowed {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n.Load() != 500 {
		t.Fatalf("admitted %d, want 500", n.Load())
	}
}

func FuzzSliding(f *testing.F) {
	f.Add(int64(10), int64(1e9), int64(0), int64(5), int64(3), int64(7))
	f.Fuzz(func(t *testing.T, n, w, idx, prev, cur, step int64) {
		l := window.Limit{Limit: n, Window: time.Duration(w)}
		if l.Validate() != nil || n > 1<<40 || prev < 0 || cur < 0 || prev > n || cur > n || step < 0 || idx < 0 || idx > 1<<20 {
			return
		}
		st := window.SlidingState{Index: idx, Prev: prev, Curr: cur}
		now := idx*int64(l.Window) + step%(3*int64(l.Window)+1)
		if now < 0 {
			return
		}
		for cost := range min(n, 3) + 1 {
			nst, d := l.Sliding(st, now, cost)
			if d.Remaining < 0 || d.Remaining > n || d.RetryAfter < 0 || (!d.Allowed && d.RetryAfter == 0) {
				t.Fatalf("bad decision %+v for %+v", d, st)
			}
			if d.Allowed != modelAdmits(l, st, now, cost) {
				t.Fatalf("disagrees with model: %+v", d)
			}
			if !d.Allowed {
				if _, ok := l.Sliding(st, now+int64(d.RetryAfter), cost); !ok.Allowed {
					t.Fatalf("RetryAfter %v not enough", d.RetryAfter)
				}
			}
			_ = nst
		}
	})
}
