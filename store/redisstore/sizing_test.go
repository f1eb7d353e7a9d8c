// The sizing rule of docs/distributed.md ("Sizing Redis"), measured on a real
// redis-server: bytes per key (INFO used_memory over many keys, and
// MEMORY USAGE of one) and the TTL of each kind of key.

package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/redisstore"
)

func usedMemory(t *testing.T, addr string) int64 {
	t.Helper()
	info, err := redistest.Bulk(addr, "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(info)[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// docs/distributed.md's sizing rule: per kind, the most bytes a key takes in Redis
// (jemalloc, Redis 7) with the 28-byte key names used here (prefix
// "sluice:", kind letter, a 19-byte item key), and its TTL. Measured:
// 2,000 keys of each kind on an empty Redis.
func TestKeySizing(t *testing.T) {
	r := startRedis(t)
	s, err := redisstore.Open("redis://"+r.Addr, redisstore.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	spec := func(l store.Limit) *store.Spec {
		sp, err := store.NewSpec(l)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	// Slow buckets (10 tokens at 0.01/s), so that no key expires while
	// the others are written.
	double, limb := mustSpec(t, 10, 0.01), mustSpec(t, 10, math.Nextafter(0.01, 0))
	if !redisstore.FitsDoublePath(double) || redisstore.FitsDoublePath(limb) {
		t.Fatal("the buckets do not take the two paths")
	}
	const n = 10000
	ti := 0
	for _, tc := range []struct {
		name     string
		sp       *store.Spec
		cost     int64
		maxBytes int64         // per key, INFO used_memory delta / n
		maxTTL   time.Duration // the longest PTTL a key gets
	}{
		// Emptied: full again after 1,000 s, then up to 2 s more (the
		// double path rounds up by 1 s so that most writes keep the TTL).
		{"token bucket, double path", double, 10, 260, 1002 * time.Second},
		{"token bucket, limb path", limb, 1, 260, 1002 * time.Second},
		{"sliding window", spec(store.Limit{Kind: store.SlidingWindow, Window: windowLimit(10, time.Minute)}), 1, 260, 2 * time.Minute},
		{"fixed window", spec(store.Limit{Kind: store.FixedWindow, Window: windowLimit(10, time.Minute)}), 1, 260, 2 * time.Minute},
		{"in-flight set, one slot", spec(store.Limit{Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: time.Minute}), 1, 300, time.Minute + time.Second},
	} {
		ti++
		before := usedMemory(t, r.Addr)
		var key string
		for i := range n {
			key = fmt.Sprintf("api:user:%d:%08d", ti, i) // 19 bytes
			res, err := s.Take(ctx, []store.Item{{Key: key, Spec: tc.sp, Cost: tc.cost}})
			if err != nil || !res.Allowed {
				t.Fatalf("%s: %+v %v", tc.name, res, err)
			}
		}
		per := (usedMemory(t, r.Addr) - before) / n
		rk := s.Key(tc.sp.Kind, key)
		usage, err := redistest.Do(r.Addr, "MEMORY", "USAGE", rk)
		if err != nil {
			t.Fatal(err)
		}
		pttl, err := redistest.Do(r.Addr, "PTTL", rk)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.ParseInt(strings.TrimPrefix(pttl, ":"), 10, 64)
		t.Logf("%-26s %d B/key (used_memory), MEMORY USAGE %s B, PTTL %d ms, key %d B", tc.name, per, strings.TrimPrefix(usage, ":"), ms, len(rk))
		if per > tc.maxBytes || ms <= 0 || time.Duration(ms)*time.Millisecond > tc.maxTTL {
			t.Errorf("%s: %d B/key (want <= %d), PTTL %d ms (want 1 ms to %v)", tc.name, per, tc.maxBytes, ms, tc.maxTTL)
		}
	}

	// The book: a request_id's answer (a 300-byte answer), a lease record
	// with a 100-byte receipt (and its place among the receipts).
	b := redisstore.NewBook(s, book.Config{IdempotencyWindow: 5 * time.Minute, ReceiptWindow: 10 * time.Minute, MaxReceipts: 1 << 30})
	answer, receipt := []byte(strings.Repeat("a", 300)), []byte(strings.Repeat("r", 100))
	before := usedMemory(t, r.Addr)
	for i := range n {
		id := fmt.Sprintf("req-%016d", i)
		if _, first, err := b.Begin(ctx, id, "fp"); err != nil || !first {
			t.Fatalf("Begin: %v %v", first, err)
		}
		b.Finish(ctx, id, "fp", answer)
	}
	perID := (usedMemory(t, r.Addr) - before) / n
	before = usedMemory(t, r.Addr)
	for range n {
		if _, err := b.AddRecord(ctx, book.Record{Receipt: receipt}); err != nil {
			t.Fatal(err)
		}
	}
	perLease := (usedMemory(t, r.Addr) - before) / n
	t.Logf("request_id with a 300 B answer: %d B; lease record with a 100 B receipt: %d B", perID, perLease)
	if perID > 520 || perLease > 900 {
		t.Errorf("request_id %d B (want <= 520), lease record %d B (want <= 900)", perID, perLease)
	}
}
