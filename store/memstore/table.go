// A shard's table of keys: open addressing over entries in fixed-size chunks.

package memstore

import "hash/maphash"

// table is a shard's keys: an open-addressing hash table of 4-byte cells
// over entries stored in fixed-size chunks. A slot holds 8 bits of the
// key's hash (to skip most non-matching entries without touching them) and
// the entry's index + 1 (0: empty; tomb: deleted). Entries never move, so a
// pointer to one stays valid until it is deleted, and a key costs its
// 48-byte entry, 4 bytes per slot (at a load of 0.4 to 0.8) and its use
// mark, one bit (marks) — about 62 bytes, where a Go map of pointers to
// entries costs about 90. A chunk holds 1,024 entries: 49,152 bytes, six
// whole pages (the allocator rounds a large object up to whole pages).
//
// Not safe for concurrent use: the shard's mutex guards it.
type table struct {
	seed   maphash.Seed // the store's: the low bits of a hash pick the shard
	cells  []uint32
	chunks [][]tentry
	free   []uint32 // indexes of deleted entries, reused first
	n      int      // live entries
	used   int      // cells not empty (live and tombstones)
	next   uint32   // entries ever allocated (the next new index)
	cursor uint32   // where the eviction scan resumes
	hand   uint32   // where the CLOCK hand is (lru.go)
	// marks holds a use mark per entry (bit i%64 of word i/64): set when
	// get finds the entry or insert creates it, cleared by unmark (the
	// CLOCK hand) and remove.
	marks []uint64
	// blocks holds the end of each penalty box a key has (Spec.Penalize:
	// ns since t0), by entry; nil until a key is first blocked, so that
	// keys without one cost nothing. A key blocked keeps its entry at
	// least until its block ends (holdIdle); removing the entry forgets
	// its block.
	blocks map[*tentry]int64
}

// tentry is an entry with its key; key "" marks a free entry (store keys
// are never empty).
type tentry struct {
	key string
	entry
}

const (
	chunkBits  = 10
	chunkSize  = 1 << chunkBits
	indexMask  = 1<<24 - 1
	tomb       = indexMask // a slot whose entry was deleted
	maxEntries = indexMask - 1
	minCells   = 8
)

func tagOf(h uint64) uint32 { return uint32(h>>56) << 24 }

// pos returns the first slot to probe for hash h (the low bits pick the
// shard, so the table uses the bits above them).
func (t *table) pos(h uint64) int { return int(h>>6) & (len(t.cells) - 1) }

func (t *table) at(i uint32) *tentry { return &t.chunks[i>>chunkBits][i&(chunkSize-1)] }

// get returns key's entry (with the table's copy of the key), or nil; it
// marks the entry used.
func (t *table) get(h uint64, key string) *tentry {
	if t.n == 0 {
		return nil
	}
	tag, mask := tagOf(h), len(t.cells)-1
	for p := t.pos(h); ; p = (p + 1) & mask {
		s := t.cells[p]
		if s == 0 {
			return nil
		}
		if s&^indexMask == tag && s&indexMask != tomb {
			i := s&indexMask - 1
			if e := t.at(i); e.key == key {
				t.marks[i>>6] |= 1 << (i & 63) // a use
				return e
			}
		}
	}
}

// insert adds key (absent) with state e and returns its entry, marked
// used; nil when the shard holds the most entries an index can name.
func (t *table) insert(h uint64, key string, e entry) *tentry {
	if t.n >= maxEntries {
		return nil
	}
	if (t.used+1)*5 > len(t.cells)*4 { // load above 0.8: grow, or just sweep tombstones
		size := max(len(t.cells), minCells)
		if (t.n+1)*5 > size*2 { // live entries above 0.4 after the rebuild: double
			size *= 2
		}
		t.rebuild(size)
	}
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = t.next
		t.next++
		if int(i>>chunkBits) == len(t.chunks) {
			t.chunks = append(t.chunks, make([]tentry, chunkSize))
			t.marks = append(t.marks, make([]uint64, chunkSize/64)...)
		}
	}
	// A new key is not marked: one used once is evicted before any used
	// again since the hand last passed it (a flood of one-request keys
	// evicts its own keys first).
	te := t.at(i)
	te.key, te.entry = key, e
	t.place(h, i)
	t.n++
	t.used++
	return te
}

// place puts entry i in the first free slot of its probe sequence.
func (t *table) place(h uint64, i uint32) {
	mask := len(t.cells) - 1
	for p := t.pos(h); ; p = (p + 1) & mask {
		if t.cells[p] == 0 {
			t.cells[p] = tagOf(h) | (i + 1)
			return
		}
	}
}

// rebuild rehashes every live entry into size cells (dropping tombstones).
func (t *table) rebuild(size int) {
	t.cells = make([]uint32, size)
	t.used = 0
	for i := uint32(0); i < t.next; i++ {
		if e := t.at(i); e.key != "" {
			t.place(t.hash(e.key), i)
			t.used++
		}
	}
}

// remove deletes entry i (whose key hashes to h).
func (t *table) remove(h uint64, i uint32) {
	mask := len(t.cells) - 1
	for p := t.pos(h); ; p = (p + 1) & mask {
		s := t.cells[p]
		if s == 0 {
			return
		}
		if s&indexMask == i+1 {
			t.cells[p] = s&^indexMask | tomb
			break
		}
	}
	if len(t.blocks) > 0 {
		delete(t.blocks, t.at(i))
	}
	*t.at(i) = tentry{}
	t.marks[i>>6] &^= 1 << (i & 63)
	t.free = append(t.free, i)
	t.n--
}

// scan calls fn on up to budget entries (free ones count too, so the
// work is bounded), resuming where the last scan stopped so that scans
// visit every entry in turn, and deletes those for which fn returns true.
func (t *table) scan(budget int, fn func(e *entry) bool) {
	for seen := 0; seen < budget && t.n > 0; seen++ {
		if t.cursor >= t.next {
			t.cursor = 0
		}
		i := t.cursor
		t.cursor++
		if te := t.at(i); te.key != "" && fn(&te.entry) {
			t.remove(t.hash(te.key), i)
		}
	}
}

// unmark clears entry i's use mark and reports whether it was set.
func (t *table) unmark(i uint32) bool {
	w, b := &t.marks[i>>6], uint64(1)<<(i&63)
	set := *w&b != 0
	*w &^= b
	return set
}

func (t *table) hash(key string) uint64 { return maphash.String(t.seed, key) }

// blockOf returns the end of e's block (0: none, nil e included),
// forgetting a block that ended by d.
func (t *table) blockOf(e *tentry, d int64) int64 {
	if e == nil || len(t.blocks) == 0 {
		return 0
	}
	u, ok := t.blocks[e]
	if ok && u <= d {
		delete(t.blocks, e)
		return 0
	}
	return u
}

// setBlock records that e's block ends at until, and keeps the entry (not
// idle) until then.
func (t *table) setBlock(e *tentry, until int64) {
	if t.blocks == nil {
		t.blocks = map[*tentry]int64{}
	}
	t.blocks[e] = until
	e.idle = max(e.idle, until)
}

// holdIdle keeps a blocked entry e from being idle before its block ends,
// after a write of its idle time.
func (t *table) holdIdle(e *tentry) {
	if len(t.blocks) > 0 {
		if u, ok := t.blocks[e]; ok {
			e.idle = max(e.idle, u)
		}
	}
}
