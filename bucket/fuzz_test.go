package bucket_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// FuzzOps drives Allow/Reserve/Cancel/SetLimit sequences decoded from the
// input, on a manual clock, and checks that nothing panics, errors are only
// the documented ones, tokens never exceed capacity, and the admitted cost
// never exceeds B + r*t plus what cancelled reservations returned.
func FuzzOps(f *testing.F) {
	f.Add(uint16(3), 2.0, []byte{0, 1, 0, 0, 1, 0, 2, 200, 1, 5, 3, 0})
	f.Add(uint16(100), 20.0, []byte{1, 50, 9, 1, 60, 9, 3, 0, 0, 2, 255, 255})
	f.Add(uint16(1), 1e9, []byte{0, 1, 1, 0, 1, 1, 4, 7, 7})
	f.Fuzz(func(t *testing.T, capacity uint16, rate float64, ops []byte) {
		l := bucket.Limit{Capacity: int64(capacity), Rate: rate}
		c := sluice.NewManualClock(epoch0)
		b, err := bucket.New(l, bucket.WithClock(c))
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Fatalf("New: %v", err)
			}
			return
		}
		var admitted, returned int64
		var reservations []*bucket.Reservation
		var elapsed, horizon time.Duration
		maxCap := l.Capacity
		for len(ops) >= 3 {
			op, arg := ops[0]%5, int64(binary.LittleEndian.Uint16(ops[1:3]))
			ops = ops[3:]
			switch op {
			case 0: // advance
				step := time.Duration(arg) * time.Millisecond
				c.Advance(step)
				elapsed += step
			case 1:
				d, err := b.Allow(arg)
				if err != nil {
					if !errors.Is(err, sluice.ErrCostExceedsCapacity) || arg <= b.Limit().Capacity {
						t.Fatalf("Allow(%d): %v", arg, err)
					}
					continue
				}
				if d.Allowed {
					admitted += arg
				} else if d.RetryAfter <= 0 {
					t.Fatalf("refused without RetryAfter: %+v", d)
				}
			case 2:
				r, err := b.Reserve(arg, time.Duration(arg)*time.Second)
				if err != nil {
					if !errors.Is(err, sluice.ErrCostExceedsCapacity) && !errors.Is(err, sluice.ErrWaitTooLong) {
						t.Fatalf("Reserve(%d): %v", arg, err)
					}
					continue
				}
				admitted += arg
				reservations = append(reservations, r)
				// Reserved tokens are admitted at their time to act.
				horizon = max(horizon, elapsed+r.Delay())
			case 3:
				if len(reservations) > 0 {
					r := reservations[int(arg)%len(reservations)]
					before := b.Tokens()
					r.Cancel()
					if got := b.Tokens() - before; got > 0 {
						returned += r.Cost()
					}
				}
			case 4:
				nl := bucket.Limit{Capacity: arg, Rate: float64(arg%97 + 1)}
				if err := b.SetLimit(nl); err != nil {
					if !errors.Is(err, sluice.ErrInvalidLimit) {
						t.Fatal(err)
					}
					continue
				}
				maxCap = max(maxCap, nl.Capacity)
				// A change of rate breaks the simple bound below; restart it.
				admitted, returned, elapsed, horizon = 0, 0, 0, 0
				rate = nl.Rate
			}
			if tk := b.Tokens(); tk > float64(b.Limit().Capacity) || math.IsNaN(tk) {
				t.Fatalf("tokens %v above capacity %d", tk, b.Limit().Capacity)
			}
		}
		bound := float64(maxCap) + rate*max(elapsed, horizon).Seconds() + float64(returned)
		if float64(admitted) > bound*(1+1e-9)+1e-6 {
			t.Fatalf("admitted %d > bound %v", admitted, bound)
		}
	})
}
