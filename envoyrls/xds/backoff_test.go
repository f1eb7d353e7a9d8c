// Tests of the reconnection backoff: doubling, bounded by Max, shortened by the jitter.

package xds

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: -1}
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		if got := b.delay(n); got != want*time.Millisecond {
			t.Errorf("delay(%d) = %v, want %v", n, got, want*time.Millisecond)
		}
	}
	if got := b.delay(1 << 20); got != time.Second {
		t.Errorf("delay(2^20) = %v, want the max", got)
	}
	j := Backoff{Initial: time.Second, Max: 4 * time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := j.delay(5)
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("jittered delay %v outside [2s, 4s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d distinct jittered delays in 200, want them spread", len(seen))
	}
	var zero Backoff
	if d := zero.delay(0); d < DefaultBackoffInitial/2 || d > DefaultBackoffInitial {
		t.Errorf("default first delay %v", d)
	}
	if d := zero.delay(100); d > DefaultBackoffMax || d < DefaultBackoffMax/2 {
		t.Errorf("default last delay %v", d)
	}
}
