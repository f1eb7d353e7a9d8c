package bucket_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

var epoch0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newAt(t *testing.T, l bucket.Limit, opts ...bucket.Option) (*bucket.Bucket, *sluice.ManualClock) {
	t.Helper()
	c := sluice.NewManualClock(epoch0)
	b, err := bucket.New(l, append([]bucket.Option{bucket.WithClock(c)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

func allow(t *testing.T, b *bucket.Bucket, cost int64) sluice.Decision {
	t.Helper()
	d, err := b.Allow(cost)
	if err != nil {
		t.Fatalf("Allow(%d): %v", cost, err)
	}
	return d
}

// docs/behaviour.md section 1, vector 1.
func TestVector1(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 3, Rate: 2})
	for i := range 3 {
		if d := allow(t, b, 1); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("request %d: %+v", i+1, d)
		}
	}
	d := allow(t, b, 1)
	if d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("fourth: %+v, want refused with 0.5s", d)
	}
	c.Advance(250 * time.Millisecond)
	if d := allow(t, b, 1); d.Allowed || d.RetryAfter != 250*time.Millisecond {
		t.Fatalf("at 0.25s: %+v", d)
	}
	c.Advance(250 * time.Millisecond)
	if d := allow(t, b, 1); !d.Allowed || d.RetryAfter != 0 {
		t.Fatalf("at 0.5s: %+v", d)
	}
	if d := allow(t, b, 1); d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("next at 0.5s: %+v", d)
	}
}

// docs/behaviour.md section 1, vector 2.
func TestVector2(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 3, Rate: 1})
	want := []bool{true, true, true, false}
	for i, w := range want {
		if d := allow(t, b, 1); d.Allowed != w {
			t.Fatalf("call %d: %+v", i+1, d)
		}
	}
	if d := allow(t, b, 1); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("fifth: %+v, want a 1.0s wait", d)
	}
	c.Advance(time.Second)
	if d := allow(t, b, 1); !d.Allowed || d.RetryAfter != 0 {
		t.Fatalf("at 1s: %+v", d)
	}
}

// docs/behaviour.md section 1, vector 3.
func TestVector3(t *testing.T) {
	t.Parallel()
	b, _ := newAt(t, bucket.Limit{Capacity: 5, Rate: 2})
	var allowed, denied int
	for range 8 {
		if allow(t, b, 1).Allowed {
			allowed++
		} else {
			denied++
		}
	}
	if allowed != 5 || denied != 3 {
		t.Fatalf("allowed %d denied %d, want 5 and 3", allowed, denied)
	}
}

// docs/behaviour.md section 1, vector 4: idle time beyond full earns nothing.
func TestVector4(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 100, Rate: 20})
	c.Advance(10 * time.Hour)
	if got := b.Tokens(); got != 100 {
		t.Fatalf("tokens after idle %v, want 100", got)
	}
	for i := range 100 {
		if !allow(t, b, 1).Allowed {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	if d := allow(t, b, 1); d.Allowed || d.RetryAfter != 50*time.Millisecond {
		t.Fatalf("101st: %+v", d)
	}
	// Then admission follows the refill: offer 100/s for 10 s, expect 20/s.
	admitted := 0
	for range 1000 {
		c.Advance(10 * time.Millisecond)
		if allow(t, b, 1).Allowed {
			admitted++
		}
	}
	if admitted != 200 {
		t.Fatalf("admitted %d in 10 s, want 200", admitted)
	}
}

// docs/behaviour.md section 1, vector 5: offered 25/s sustained, admission settles at 10/s.
func TestVector5(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 60, Rate: 10})
	perSecond := make([]int, 30)
	for i := range 25 * 30 {
		at := time.Duration(i) * time.Second / 25
		c.Set(epoch0.Add(at))
		if allow(t, b, 1).Allowed {
			perSecond[at/time.Second]++
		}
	}
	// The stored 60 plus 10/s refill run out after 60/(25-10) = 4 s.
	for s := 5; s < 30; s++ {
		if perSecond[s] != 10 {
			t.Fatalf("second %d admitted %d, want 10 (all: %v)", s, perSecond[s], perSecond)
		}
	}
	total := 0
	for _, n := range perSecond {
		total += n
	}
	if total != 60+10*30-1 && total != 60+10*30 {
		t.Fatalf("total %d, want about %d", total, 60+10*30)
	}
}

// docs/behaviour.md section 1, vector 6: a weighted request is refused and told the wait.
func TestVector6(t *testing.T) {
	t.Parallel()
	b, _ := newAt(t, bucket.Limit{Capacity: 100, Rate: 2})
	allow(t, b, 88) // 12 left
	d := allow(t, b, 20)
	if d.Allowed || d.Remaining != 12 || d.RetryAfter != 4*time.Second {
		t.Fatalf("cost 20 with 12 left: %+v, want refused, 12 left, 4s wait", d)
	}
	if d := allow(t, b, 12); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost 12: %+v", d)
	}
}

func TestCostErrors(t *testing.T) {
	t.Parallel()
	b, _ := newAt(t, bucket.Limit{Capacity: 10, Rate: 1})
	_, err := b.Allow(11)
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) || err.Error() != "sluice: cost 11 exceeds capacity 10" {
		t.Fatalf("cost 11: %v", err)
	}
	if _, err := b.Allow(-1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("cost -1: %v", err)
	}
	if _, err := b.Reserve(11, time.Hour); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("reserve 11: %v", err)
	}
	if got := b.Tokens(); got != 10 {
		t.Fatalf("errors consumed tokens: %v left", got)
	}
	d := allow(t, b, 0)
	if !d.Allowed || d.Remaining != 10 || b.Tokens() != 10 {
		t.Fatalf("peek: %+v, tokens %v", d, b.Tokens())
	}
}

func TestInvalidLimits(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	for _, l := range []bucket.Limit{
		{Capacity: 0, Rate: 1},
		{Capacity: -5, Rate: 1},
		{Capacity: 1, Rate: 0},
		{Capacity: 1, Rate: -1},
		{Capacity: 1, Rate: nan},
		{Capacity: 1, Rate: math.Inf(-1)},
		{Capacity: 1, Rate: math.Inf(1)},
		{Capacity: 1, Rate: 1e30},
		{Capacity: 1 << 62, Rate: 1},
		{Capacity: 1e9, Rate: 1e-9},
		bucket.Every(0),
		bucket.Every(-time.Second),
	} {
		b, err := bucket.New(l)
		if b != nil || !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("New(%v) = %v, %v; want ErrInvalidLimit", l, b, err)
		}
		if err := l.Validate(); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("Validate(%v) = %v", l, err)
		}
	}
	for _, l := range []bucket.Limit{
		{Capacity: 1, Rate: 0.001}, {Capacity: 1, Rate: 1e9}, {Capacity: 1e9, Rate: 1e9},
		{Capacity: 1 << 40, Rate: 1e12}, bucket.PerMinute(100), bucket.PerHour(5), bucket.Every(1500 * time.Millisecond),
	} {
		if _, err := bucket.New(l); err != nil {
			t.Errorf("New(%v): %v", l, err)
		}
	}
}

func TestStartEmpty(t *testing.T) {
	t.Parallel()
	b, c := newAt(t, bucket.Limit{Capacity: 3, Rate: 1}, bucket.StartEmpty())
	if d := allow(t, b, 1); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("empty start: %+v", d)
	}
	c.Advance(3 * time.Second)
	for range 3 {
		if !allow(t, b, 1).Allowed {
			t.Fatal("refill after empty start refused")
		}
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		got, want bucket.Limit
	}{
		{bucket.PerSecond(10), bucket.Limit{Capacity: 10, Rate: 10}},
		{bucket.PerMinute(120), bucket.Limit{Capacity: 120, Rate: 2}},
		{bucket.PerHour(7200), bucket.Limit{Capacity: 7200, Rate: 2}},
		{bucket.Every(250 * time.Millisecond).WithCapacity(5), bucket.Limit{Capacity: 5, Rate: 4}},
	} {
		if tc.got != tc.want {
			t.Errorf("got %v want %v", tc.got, tc.want)
		}
	}
}
