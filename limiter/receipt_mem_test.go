package limiter_test

// What a kept receipt costs: the memory of N receipts in the in-process
// book, as the server keeps them for /v1/settle.

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/memstore"
)

const receiptSrc = `
limits:
  - name: per_tenant
    key: "tenant:{tenant}"
    capacity: 1000000000
    refill_per_second: 1000000
  - name: per_user
    key: "user:{user}"
    capacity: 100
    refill_per_second: 10
`

// receiptBytes is the heap that n receipts of checks with distinct users
// (two limits each: a tenant's and a user's) hold once kept in the
// server's in-process book, per receipt: the checks are made twice, and
// only the second round's receipts are measured (the first made the keys'
// states).
func receiptBytes(t *testing.T, n int, marshal func(limiter.Receipt) ([]byte, error)) (perReceipt float64, sample []byte) {
	l := limiterOver(t, receiptSrc, memstore.New())
	ctx := context.Background()
	reqs := make([]limiter.Request, n)
	for i := range reqs {
		reqs[i] = limiter.Request{Descriptors: map[string]string{"tenant": fmt.Sprint("t", i%100), "user": fmt.Sprintf("user-%07d", i)}, Receipt: true}
	}
	for _, r := range reqs {
		if res, err := l.Check(ctx, r); err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
	}
	b := book.NewMemory(book.Config{}, nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, r := range reqs {
		res, err := l.Check(ctx, r)
		if err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
		rc, _ := marshal(res.Receipt)
		if sample == nil {
			sample = rc
		}
		if _, err := b.AddRecord(ctx, book.Record{Receipt: rc}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(b)
	runtime.KeepAlive(reqs)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n), sample
}

// A kept receipt costs less than half what it did: 432 B of heap per
// receipt of two limits before (the JSON encoding, 211 B here, under a
// record, an id string and a FIFO entry of 40 B); now at most 216 B
// (about 190: the compact encoding, 78 B, and about 100 B of book).
// The --max-receipts row of docs/service.md's flag table states the figure.
func TestReceiptMemory(t *testing.T) {
	per, sample := receiptBytes(t, 200_000, limiter.Receipt.MarshalCompact)
	t.Logf("%.0f B of heap per kept receipt (two limits; a receipt encodes to %d B: %q)", per, len(sample), sample)
	if per > 216 {
		t.Fatalf("a kept receipt costs %.0f B of heap, more than half the 432 B it cost before", per)
	}
}
