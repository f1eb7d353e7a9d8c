package topk_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/topk"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// 1,000,000 decisions over 100,000 keys with 10 planted heavy keys: all 10
// are the top 10, each count within its error of the truth, each error
// within the documented bound (total weight / k).
func TestPlantedHeavyKeys(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	tr := topk.New(100, time.Minute, time.Minute).WithClock(c.now)
	rnd := rand.New(rand.NewPCG(1, 2))
	truth := map[string]int64{}
	var total int64
	for i := range 1_000_000 {
		var key string
		if i%50 < 10 { // 20 % of the stream: 2 % for each heavy key
			key = fmt.Sprintf("heavy-%d", i%50)
		} else {
			key = fmt.Sprintf("k%d", rnd.IntN(100_000))
		}
		w := int64(1 + rnd.IntN(3))
		tr.Add(key, w)
		truth[key] += w
		total += w
	}
	top := tr.Top(time.Minute, 10)
	if len(top) != 10 {
		t.Fatalf("%d entries", len(top))
	}
	for _, e := range top {
		if _, heavy := truth[e.Key]; !heavy || e.Key[:5] != "heavy" {
			t.Errorf("rule: the 10 planted heavy keys are the top 10: %+v", e)
		}
		if w := truth[e.Key]; e.Count < w || e.Count-e.Error > w {
			t.Errorf("rule: count overcounts by at most error: %+v, true %d", e, w)
		}
		if e.Error > total/100 {
			t.Errorf("rule: the error is at most total/k = %d: %+v", total/100, e)
		}
	}
	if n := tr.Counters(); n > 100 {
		t.Fatalf("counters %d > k", n)
	}
}

// Against an exact count, on random streams over several epochs: every
// reported key is within its bounds, and every key heavier than the
// span's bound in each epoch is reported.
func TestAgainstExactCounts(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		c := &clock{t: time.Unix(1_800_000_000, 0)}
		k := 5 + rnd.IntN(20)
		tr := topk.New(k, 10*time.Second, time.Minute).WithClock(c.now)
		type ev struct {
			at  time.Time
			key string
			w   int64
		}
		var evs []ev
		keys := 3 + rnd.IntN(200)
		for range 5000 {
			c.t = c.t.Add(time.Duration(rnd.IntN(40)) * time.Millisecond)
			key := fmt.Sprintf("k%d", int(float64(keys)*rnd.Float64()*rnd.Float64())) // skewed
			w := int64(1 + rnd.IntN(5))
			tr.Add(key, w)
			evs = append(evs, ev{c.t, key, w})
		}
		for _, span := range []time.Duration{10 * time.Second, 30 * time.Second, time.Minute} {
			epoch := 10 * time.Second
			first := (c.t.UnixNano()/int64(epoch) - int64(span/epoch) + 1) * int64(epoch)
			truth := map[string]int64{}
			for _, e := range evs {
				if e.at.UnixNano() >= first {
					truth[e.key] += e.w
				}
			}
			top := tr.Top(span, 1000)
			seen := map[string]bool{}
			for _, e := range top {
				seen[e.Key] = true
				if w := truth[e.Key]; e.Count < w || e.Count-e.Error > w || e.Error < 0 {
					t.Fatalf("seed %d span %v: %+v, true %d", seed, span, e, w)
				}
			}
			for key, w := range truth {
				if !seen[key] && len(top) < k {
					t.Fatalf("seed %d span %v: %q (true %d) missing while only %d reported", seed, span, key, w, len(top))
				}
			}
		}
	}
}

// Epochs age out: a key heavy a while ago is gone from a span that no
// longer covers it.
func TestSpansAgeOut(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	tr := topk.New(10, 10*time.Second, 15*time.Minute).WithClock(c.now)
	tr.Add("old", 100)
	c.t = c.t.Add(2 * time.Minute)
	tr.Add("new", 5)
	if top := tr.Top(time.Minute, 10); len(top) != 1 || top[0] != (topk.Entry{Key: "new", Count: 5}) {
		t.Fatalf("rule: the last minute holds only the new key: %+v", top)
	}
	if top := tr.Top(15*time.Minute, 10); len(top) != 2 || top[0].Key != "old" || top[0].Count != 100 {
		t.Fatalf("rule: the last 15 minutes hold both, exactly (summaries not full): %+v", top)
	}
	c.t = c.t.Add(20 * time.Minute)
	if top := tr.Top(15*time.Minute, 10); len(top) != 0 {
		t.Fatalf("rule: nothing older than the span: %+v", top)
	}
}

// Memory stays bounded: 10,000,000 distinct keys leave at most k counters
// per epoch.
func TestMemoryBounded(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10,000,000 keys: not in -short")
	}
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	tr := topk.New(100, 10*time.Second, time.Minute).WithClock(c.now)
	for i := range 10_000_000 {
		if i%1_000_000 == 0 {
			c.t = c.t.Add(10 * time.Second) // 10 epochs, a ring of 7
		}
		tr.Add(fmt.Sprint("key-", i), 1)
	}
	if n := tr.Counters(); n > 100*7 {
		t.Fatalf("rule: at most k counters per epoch kept: %d", n)
	}
}

func BenchmarkAdd(b *testing.B) {
	tr := topk.New(100, 10*time.Second, 15*time.Minute)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tr.Add(keys[i%len(keys)], 1)
	}
}
