// sluice demo: reference vectors of docs/behaviour.md replayed.

package main

import (
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/window"
)

type demoCmd struct{}

func (demoCmd) Run(e *env) error { return demo(e.stdout) }

// demo replays vectors 1 and 6 of docs/behaviour.md section 1 and vector 3
// of section 2 (the sliding/fixed window contrast).
func demo(w io.Writer) error {
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	b, err := bucket.New(bucket.Limit{Capacity: 3, Rate: 2}, bucket.WithClock(clock))
	if err != nil {
		return err
	}
	start := clock.Now()
	show := func(label string, d sluice.Decision) {
		fmt.Fprintf(w, "  t=%-6v %-22s allowed=%-5v remaining=%d retry_after=%v\n",
			clock.Now().Sub(start), label, d.Allowed, d.Remaining, d.RetryAfter)
	}
	fmt.Fprintln(w, "token bucket B=3, r=2/s (docs/behaviour.md section 1, vector 1)")
	for i := 1; i <= 4; i++ {
		d, _ := b.Allow(1)
		show(fmt.Sprintf("request %d", i), d)
	}
	clock.Advance(250 * time.Millisecond)
	d, _ := b.Allow(1)
	show("request 5", d)
	clock.Advance(250 * time.Millisecond)
	d, _ = b.Allow(1)
	show("request 6", d)
	d, _ = b.Allow(1)
	show("request 7", d)

	fmt.Fprintln(w, "weighted costs, B=100, r=2/s (docs/behaviour.md section 1, vector 6)")
	wb, err := bucket.New(bucket.Limit{Capacity: 100, Rate: 2}, bucket.WithClock(clock))
	if err != nil {
		return err
	}
	d, _ = wb.Allow(88)
	show("cost 88", d)
	d, _ = wb.Allow(20)
	show("cost 20", d)
	_, err = wb.Allow(101)
	fmt.Fprintf(w, "  cost 101: %v\n", err)

	fmt.Fprintln(w, "10 per second across a window boundary: fixed vs sliding window (docs/behaviour.md section 2, vector 3)")
	wc := sluice.NewManualClock(time.Unix(1_800_000_000, 999_000_000))
	l := window.Limit{Limit: 10, Window: time.Second}
	f, _ := window.NewFixed(l, window.WithClock(wc))
	s, _ := window.NewSliding(l, window.WithClock(wc))
	var nf, ns int
	for range 2 {
		for range 10 {
			if d, _ := f.Allow(1); d.Allowed {
				nf++
			}
			if d, _ := s.Allow(1); d.Allowed {
				ns++
			}
		}
		wc.Advance(time.Millisecond)
	}
	fmt.Fprintf(w, "  20 requests within 2 ms: fixed window admits %d, sliding window admits %d\n", nf, ns)
	return nil
}
