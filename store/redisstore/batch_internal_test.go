package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// A batch carries at most maxBookings bookings (and maxBatch requests),
// taken in queue order: a script that books runs for about 30 µs a
// booking, and on Redis 7.2+ (TIME frozen in scripts) every wait of the
// batch counts from its start, so a batch of 64 bookings would make each
// of them about 2 ms late.
func TestBatchBoundsBookings(t *testing.T) {
	book := func() *call { return &call{items: []store.Item{{MaxWait: time.Second}}} }
	take := func() *call { return &call{items: []store.Item{{}}} }
	var q []*call
	for i := range 30 {
		q = append(q, book())
		if i%3 == 0 {
			q = append(q, take())
		}
	}
	s := &Store{inflight: 1, queue: append([]*call(nil), q...)}
	var sizes []int
	from := 0
	for b := s.dequeue(); b != nil; b = s.dequeue() {
		bookings := 0
		for i, c := range b {
			if c != q[from+i] {
				t.Fatalf("batch %d: request %d out of queue order", len(sizes), i)
			}
			if c.items[0].MaxWait > 0 {
				bookings++
			}
		}
		if bookings > maxBookings || len(b) > maxBatch {
			t.Fatalf("batch %d: %d requests, %d bookings (at most %d, %d)", len(sizes), len(b), bookings, maxBatch, maxBookings)
		}
		from += len(b)
		sizes = append(sizes, len(b))
	}
	if from != len(q) || len(sizes) != 4 {
		t.Fatalf("batches %v for %d requests (30 bookings: 4 batches)", sizes, len(q))
	}
	// takes alone fill a batch up to maxBatch
	s = &Store{inflight: 1}
	for range 100 {
		s.queue = append(s.queue, take())
	}
	if b := s.dequeue(); len(b) != maxBatch {
		t.Fatalf("a batch of takes: %d, want %d", len(b), maxBatch)
	}
}
