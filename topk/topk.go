// Package topk finds the heaviest keys of a stream at bounded cost: a
// Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005) of k
// counters per epoch over a ring of epochs, so that the top keys of the
// last span (a minute, a quarter of an hour) are known in O(k) memory per
// epoch whatever the number of distinct keys.
//
// Guarantees, for a key reported with Count c and Error e over a span:
// its true weight w over the epochs of the span satisfies c-e <= w <= c
// (Count overcounts by at most Error, never undercounts), and e is at most
// the sum over those epochs of each epoch's total weight divided by k. A
// key whose true weight in an epoch exceeds that epoch's total / k is
// always among that epoch's counters.
package topk

import (
	"container/heap"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Entry is one key of a Top answer.
type Entry struct {
	Key   string `json:"key"`
	Count int64  `json:"count"` // an estimate: at least the true weight, at most Error more
	Error int64  `json:"error"` // the most Count may overcount
}

// Tracker keeps the heaviest keys over a ring of epochs. It is safe for
// concurrent use.
type Tracker struct {
	k     int
	epoch time.Duration
	mu    sync.Mutex
	ring  []summary // ring[i] holds the epoch whose index mod len(ring) is i
	index []int64   // the epoch index ring[i] holds (noEpoch: none)
	clock func() time.Time
}

// New returns a tracker of k counters per epoch, keeping epochs of length
// epoch, enough of them to answer spans up to span. k must be positive,
// epoch positive, span at least epoch.
func New(k int, epoch, span time.Duration) *Tracker {
	n := int((span + epoch - 1) / epoch)
	t := &Tracker{k: k, epoch: epoch, ring: make([]summary, n+1), index: make([]int64, n+1), clock: time.Now}
	for i := range t.index {
		t.index[i] = noEpoch
	}
	return t
}

// WithClock makes t read the time from now (tests); it returns t.
func (t *Tracker) WithClock(now func() time.Time) *Tracker {
	t.clock = now
	return t
}

// K is the number of counters per epoch.
func (t *Tracker) K() int { return t.k }

// Add adds weight w (positive) to key at the current time.
func (t *Tracker) Add(key string, w int64) {
	if w <= 0 {
		return
	}
	t.mu.Lock()
	s := t.current()
	s.add(key, w, t.k)
	t.mu.Unlock()
}

// current is the summary of the epoch now, cleared when its slot held an
// older one; t.mu is held.
func (t *Tracker) current() *summary {
	e := floorDiv(t.clock().UnixNano(), int64(t.epoch))
	i := int(((e % int64(len(t.ring))) + int64(len(t.ring))) % int64(len(t.ring)))
	if t.index[i] != e {
		t.ring[i].reset()
		t.index[i] = e
	}
	return &t.ring[i]
}

// Top returns the n heaviest keys over the last span (rounded up to whole
// epochs, the current one included), heaviest first (ties by key).
func (t *Tracker) Top(span time.Duration, n int) []Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := floorDiv(t.clock().UnixNano(), int64(t.epoch))
	epochs := min(int((span+t.epoch-1)/t.epoch), len(t.ring)-1)
	var in []*summary
	for i := range t.ring {
		if e := t.index[i]; e != noEpoch && e > now-int64(epochs) && e <= now {
			in = append(in, &t.ring[i])
		}
	}
	// Every key is charged each full summary's least count (its bound
	// when the summary does not hold it: base); a summary holding the key
	// adds what its counter says beyond that. O(counters), not keys x
	// epochs.
	var base int64
	for _, sm := range in {
		if len(sm.heap) >= t.k {
			base += sm.heap[0].count
		}
	}
	est := map[string]*Entry{}
	for _, sm := range in {
		floor := int64(0)
		if len(sm.heap) >= t.k {
			floor = sm.heap[0].count
		}
		for _, c := range sm.heap {
			e := est[c.key]
			if e == nil {
				e = &Entry{Key: c.key, Count: base, Error: base}
				est[c.key] = e
			}
			e.Count += c.count - floor
			e.Error += c.err - floor
		}
	}
	out := make([]Entry, 0, len(est))
	for _, e := range est {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// Counters is how many counters t holds now (at most k per epoch kept).
func (t *Tracker) Counters() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for i := range t.ring {
		n += len(t.ring[i].heap)
	}
	return n
}

// summary is one epoch's Space-Saving summary: counters in a min-heap by
// count, and by key.
type summary struct {
	heap  counters
	byKey map[string]*counter
}

type counter struct {
	key        string
	count, err int64
	at         int // index in the heap
}

func (s *summary) reset() {
	s.heap = s.heap[:0]
	clear(s.byKey)
}

// add adds w to key: its counter, a new one while fewer than k are held,
// else the least counter's, which key takes over (its count becomes the
// error).
func (s *summary) add(key string, w int64, k int) {
	if s.byKey == nil {
		s.byKey = make(map[string]*counter, k)
	}
	if c := s.byKey[key]; c != nil {
		c.count += w
		heap.Fix(&s.heap, c.at)
		return
	}
	if len(s.heap) < k {
		c := &counter{key: strings.Clone(key), count: w}
		s.byKey[c.key] = c
		heap.Push(&s.heap, c)
		return
	}
	c := s.heap[0]
	delete(s.byKey, c.key)
	c.key, c.err, c.count = strings.Clone(key), c.count, c.count+w
	s.byKey[c.key] = c
	heap.Fix(&s.heap, 0)
}

type counters []*counter

func (h counters) Len() int           { return len(h) }
func (h counters) Less(i, j int) bool { return h[i].count < h[j].count }
func (h counters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *counters) Push(x any) {
	c := x.(*counter)
	c.at = len(*h)
	*h = append(*h, c)
}
func (h *counters) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// noEpoch marks a ring slot that holds no epoch yet.
const noEpoch = math.MinInt64

// floorDiv is a/b rounded down (times before 1970 included).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
