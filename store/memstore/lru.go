package memstore

// Least-recently-used eviction: the room a new key gets at the cap when no
// key is idle.

import (
	"cmp"
	"math"
	"slices"
	"sync/atomic"
)

// WithRefuseWhenFull makes the store keep every key that has state at the
// cap: a request needing a new key when no key is idle is refused with a
// *store.FullError, as before least-recently-used eviction (see the
// package documentation). A flood of new keys then locks new keys out
// until the flood's keys are idle again, which may take a window's length.
func WithRefuseWhenFull() Option { return func(s *Store) { s.refuseFull = true } }

// lruPoolSize is how many of a shard's least recently used keys one scan
// ranks: a scan costs a few ns a key, so at the cap a new key pays about
// (shard keys × a few ns) / lruPoolSize for its room (1,000,000 keys:
// under a µs).
const lruPoolSize = 128

// lruCand is a ranked key: its entry and the use stamp it had when ranked
// (the entry was used since, or holds another key, when its stamp differs:
// stamps only grow, and an entry reused by a new key gets a later one).
type lruCand struct {
	used int64
	idx  uint32
}

// lruPool is a shard's least recently used buckets and windows, as ranked
// by its last scan (rank), oldest first; cands[at:] are not yet taken.
// Every key of the shard not among them was used after all of them (a key
// not ranked was used later than the last ranked one, and a use or a new
// key takes a later stamp than any given before), so the first valid
// candidate is the shard's least recently used key.
type lruPool struct {
	cands []lruCand
	at    int
	// head is, for evictLRU's choice of a shard without its lock, a lower
	// bound of the stamp of the shard's least recently used key;
	// math.MinInt64 when the shard holds keys the pool does not rank
	// (rank it first), math.MaxInt64 when it holds none.
	head atomic.Int64
}

// stamp returns a use stamp for a key of locked shard shd used at d: d,
// or one more than the shard's last stamp when that is not earlier, so
// that stamps within a shard are distinct and only grow (across shards
// they are times: the order of uses up to a clock's resolution).
func (shd *shard) stamp(d int64) int64 {
	if d <= shd.last {
		d = shd.last + 1
	}
	shd.last = d
	return d
}

// added records that locked shard shd gained a bucket or window: when its
// pool has no candidate left, it must be ranked again before evictLRU can
// take its least recently used key.
func (p *lruPool) added() {
	if p.at >= len(p.cands) && p.head.Load() != math.MinInt64 {
		p.head.Store(math.MinInt64)
	}
}

// publish sets head from the pool of locked shard shd.
func (p *lruPool) publish(shd *shard) {
	switch {
	case p.at < len(p.cands):
		p.head.Store(p.cands[p.at].used)
	case shd.m.n > 0:
		p.head.Store(math.MinInt64)
	default:
		p.head.Store(math.MaxInt64)
	}
}

// evictLRU makes room for one new key at time d by evicting the least
// recently used bucket or window of the store (the shard whose pool head
// is oldest; exact with no request in flight, else as of the heads read):
// a key found idle on the way counts as an idle eviction, any other as an
// LRU one (it had state, which its next request starts without). Lease
// sets are never evicted with live leases. It locks one shard at a time,
// called holding none, and returns how many keys it evicted (more than one
// when a scan found idle keys), leaving their count in s.keys for the
// caller; 0 when no bucket or window is held.
func (s *Store) evictLRU(d int64) int {
	for range shardCount * (lruPoolSize + 2) { // (each round ranks a shard, or passes a candidate, or evicts a key)
		best, bh := -1, int64(math.MaxInt64)
		for i := range s.shards {
			if h := s.shards[i].lru.head.Load(); h < bh {
				best, bh = i, h
			}
		}
		if best < 0 {
			return 0
		}
		shd := &s.shards[best]
		var key string
		var withState bool
		n := 0
		shd.mu.Lock()
		if shd.lru.head.Load() == math.MinInt64 {
			n = s.rank(shd, d) // (idle keys found: evicted, room made)
		} else {
			key, withState, n = s.popLRU(shd, d, bh)
		}
		shd.mu.Unlock()
		if n > 0 {
			if withState {
				s.lruEvicted.Add(1)
				if s.onLRU != nil {
					s.onLRU(key, d)
				}
			}
			return n
		}
	}
	return 0
}

// popLRU evicts the least recently used key of locked shard shd (its pool's
// first valid candidate) when its stamp is head, the shard's head as
// evictLRU read it to choose the shard, and returns the key, whether it
// had state at d (it was not idle), and 1. It returns 0 when the pool has
// no valid candidate left (head then says the shard must be ranked again,
// or holds no key), or when the first valid one is not head: head was
// only a lower bound (the candidate it named was used or evicted since),
// and another shard may now hold an older key.
func (s *Store) popLRU(shd *shard, d, head int64) (string, bool, int) {
	p := &shd.lru
	for p.at < len(p.cands) {
		c := p.cands[p.at]
		te := shd.m.at(c.idx)
		if te.key == "" || te.used != c.used {
			p.at++
			continue // evicted, or used since: a later key now
		}
		if c.used != head {
			break
		}
		p.at++
		key, withState := te.key, te.idle > d
		shd.m.remove(shd.m.hash(key), c.idx)
		s.evictions.Add(1)
		p.publish(shd)
		return key, withState, 1
	}
	p.publish(shd)
	return "", false, 0
}

// rank scans every key of locked shard shd at time d: it evicts the idle
// ones (as clean does, and returns how many, leaving their count in s.keys
// for the caller) and ranks the lruPoolSize least recently used of the
// others into the shard's pool. Like clean it makes the shard's bound of
// idle times exact.
func (s *Store) rank(shd *shard, d int64) int {
	p := &shd.lru
	heap := p.cands[:0] // a max-heap on used of the oldest seen
	low := int64(math.MaxInt64)
	n := 0
	for i := uint32(0); i < shd.m.next; i++ {
		te := shd.m.at(i)
		switch {
		case te.key == "":
			continue
		case te.idle <= d:
			shd.m.remove(shd.m.hash(te.key), i)
			n++
			continue
		}
		low = min(low, te.idle)
		c := lruCand{used: te.used, idx: i}
		if len(heap) < lruPoolSize {
			heap = append(heap, c)
			siftUp(heap, len(heap)-1)
		} else if c.used < heap[0].used {
			heap[0] = c
			siftDown(heap, 0)
		}
	}
	scanned := int64(shd.m.next) + int64(len(shd.leases))
	for k, sl := range shd.leases {
		if sl.prune(d); len(sl.ids) == 0 {
			delete(shd.leases, k)
			n++
			continue
		}
		low = min(low, slices.Max(sl.exp))
	}
	slices.SortFunc(heap, func(a, b lruCand) int { return cmp.Compare(a.used, b.used) })
	p.cands, p.at = heap, 0
	p.publish(shd)
	s.evictions.Add(uint64(n))
	s.scans.Add(1)
	shd.low, shd.calm = low, d+min(scanned*cleanCost, maxCalm)
	shd.wake.Store(max(shd.low, shd.calm))
	return n
}

func siftUp(h []lruCand, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].used >= h[i].used {
			return
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func siftDown(h []lruCand, i int) {
	for {
		l, big := 2*i+1, i
		if l < len(h) && h[l].used > h[big].used {
			big = l
		}
		if r := l + 1; r < len(h) && h[r].used > h[big].used {
			big = r
		}
		if big == i {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}

// EvictionsByReason returns the evictions so far by reason: idle (keys
// whose state was a new key's again: no decision changes) and lru (keys
// with state evicted, least recently used first, to make room for a new
// key at the cap). Their sum is Stats().Evictions.
func (s *Store) EvictionsByReason() (idle, lru uint64) {
	all, l := s.evictions.Load(), s.lruEvicted.Load()
	return all - min(l, all), l
}
