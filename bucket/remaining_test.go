package bucket_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// A bucket that was full must not lose a whole token to sub-unit rounding:
// Remaining is the largest whole cost that Allow admits at the same
// instant, and ResetAfter is exact. On the real clock the virtual clock
// almost always has a fractional part when a decision reads it.
func TestRemainingExactAfterFull(t *testing.T) {
	cases := []struct {
		l          bucket.Limit
		cost       int64
		rem        int64
		resetAfter time.Duration
	}{
		{bucket.PerSecond(10), 3, 7, 300 * time.Millisecond},
		{bucket.Limit{Capacity: 100, Rate: 20}, 3, 97, 150 * time.Millisecond},
		{bucket.PerMinute(100), 1, 99, 600 * time.Millisecond},
		{bucket.Every(7 * time.Millisecond).WithCapacity(5), 5, 0, 35 * time.Millisecond},
	}
	for _, c := range cases {
		// The real clock.
		b, err := bucket.New(c.l)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // a reading with a fraction, whatever the origin
		d := allow(t, b, c.cost)
		if !d.Allowed || d.Remaining != c.rem || d.ResetAfter != c.resetAfter {
			t.Errorf("%v: Allow(%d) on the real clock = %+v, want remaining %d, reset after %v", c.l, c.cost, d, c.rem, c.resetAfter)
		}
		// A manual clock one nanosecond after the origin (a fractional
		// reading for every case here), and the same instant after.
		mb, clk := newAt(t, c.l)
		clk.Advance(time.Nanosecond)
		d = allow(t, mb, c.cost)
		if !d.Allowed || d.Remaining != c.rem || d.ResetAfter != c.resetAfter {
			t.Errorf("%v: Allow(%d) at 1ns = %+v, want remaining %d, reset after %v", c.l, c.cost, d, c.rem, c.resetAfter)
		}
		if p := allow(t, mb, 0); p.Remaining != c.rem {
			t.Errorf("%v: a peek at the same instant says %d, want %d", c.l, p.Remaining, c.rem)
		}
		if c.rem > 0 {
			if d := allow(t, mb, c.rem); !d.Allowed || d.Remaining != 0 {
				t.Errorf("%v: Allow(%d) at the same instant = %+v, want admitted with 0 left", c.l, c.rem, d)
			}
			if d := allow(t, mb, 1); d.Allowed {
				t.Errorf("%v: one more at the same instant was admitted: %+v", c.l, d)
			}
		}
	}
}

// A reservation on a full bucket restarts it exactly too: booking the whole
// capacity at a fractional instant leaves nothing owed beyond the cost.
func TestReserveOnFullIsExact(t *testing.T) {
	t.Parallel()
	b, clk := newAt(t, bucket.PerSecond(10))
	clk.Advance(time.Nanosecond)
	r, err := b.Reserve(10, 0)
	if err != nil {
		t.Fatalf("Reserve(10, 0) on a full bucket: %v", err)
	}
	if r.Delay() != 0 {
		t.Fatalf("Reserve(10) on a full bucket must be due at once, not after %v", r.Delay())
	}
	clk.Advance(100 * time.Millisecond)
	if d := allow(t, b, 1); !d.Allowed {
		t.Fatalf("one token 100 ms after emptying a 10/s bucket was refused: %+v", d)
	}
}
