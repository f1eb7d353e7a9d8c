package bucket_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// ReserveClassAt on vector P1 of docs/behaviour.md section 7.2 (B=10,
// r=1; standard 0.2 booking at most 2 s, batch 0.5 never waiting,
// interactive 0): the same admissions and waits as the store's rule.
func TestReserveClassVectorP1(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	b, err := bucket.New(bucket.Limit{Capacity: 10, Rate: 1}, bucket.WithClock(fixed(t0)))
	if err != nil {
		t.Fatal(err)
	}
	const standard, batch = 200_000, 500_000
	rows := []struct {
		at      time.Duration
		ppm     uint32
		cost    int64
		maxWait time.Duration
		ok      bool
		wait    time.Duration
	}{
		{0, batch, 5, 0, true, 0},
		{0, batch, 1, 0, false, 0},
		{0, standard, 3, 0, true, 0},
		{0, standard, 1, 2 * time.Second, true, time.Second},
		{0, standard, 2, 2 * time.Second, false, 0},
		{0, 0, 1, 0, true, 0},
		{0, 0, 1, 0, false, 0},
		{0, 0, 1, 3 * time.Second, true, time.Second},
		{2 * time.Second, batch, 1, 0, false, 0},
		{7 * time.Second, batch, 1, 0, true, 0},
		{7 * time.Second, 0, 1, 0, true, 0},
	}
	for i, r := range rows {
		res, err := b.ReserveClassAt(t0.Add(r.at), r.cost, r.maxWait, r.ppm)
		if r.ok != (err == nil) || (err != nil && !errors.Is(err, sluice.ErrWaitTooLong)) {
			t.Fatalf("row %d: %v, want admitted %v", i+1, err, r.ok)
		}
		if err == nil && res.DelayFrom(t0.Add(r.at)) != r.wait {
			t.Fatalf("row %d: wait %v, want %v", i+1, res.DelayFrom(t0.Add(r.at)), r.wait)
		}
	}
	if _, err := b.ReserveClassAt(t0.Add(7*time.Second), 11, time.Hour, batch); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("cost above the capacity: %v", err)
	}
}

// A class's booking deeper than its share waits until the booking is
// within its view: from a full bucket (B=10, r=1) batch (0.5) books 8
// ready 3 s later, where a booking without a class is ready at once; a
// cancel returns it exactly.
func TestReserveClassWaitsForItsShare(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	b, _ := bucket.New(bucket.Limit{Capacity: 10, Rate: 1}, bucket.WithClock(fixed(t0)))
	r, err := b.ReserveClassAt(t0, 8, 3*time.Second, 500_000)
	if err != nil || r.DelayFrom(t0) != 3*time.Second {
		t.Fatalf("batch 8 of a full 10: %v, wait %v", err, r.DelayFrom(t0))
	}
	if _, err := b.ReserveClassAt(t0, 1, 3*time.Second, 500_000); err == nil {
		t.Fatal("batch 1 more within 3 s: admitted")
	}
	r.CancelAt(t0)
	if got := b.TokensAt(t0); got != 10 {
		t.Fatalf("after cancel: %v tokens, want 10", got)
	}
}

type fixed time.Time

func (f fixed) Now() time.Time { return time.Time(f) }
