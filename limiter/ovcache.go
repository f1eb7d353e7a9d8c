// The per-limit cache of resolved overrides: from a request's rendered key
// to the override that decides it and the limit's status under it.

package limiter

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// ovSlots is the number of entries of a limit's cache (direct-mapped): its
// memory is bounded whatever the number of keys.
const ovSlots = 512

// ovCache keeps, per limit of a compiled policy whose key determines the
// descriptors its overrides can match (keyed), the answer of the limit's
// Index for recent keys. An entry holds while the Index's Version is the
// one it was resolved under, and up to its rule's expiry: Put, Delete,
// Sweep and SetPolicy change the Version, so a check after one of them
// resolves anew. A key takes a slot that another live key holds only when
// it misses it twice in a row (so that a flood of new keys neither
// allocates nor evicts hot ones).
type ovCache struct {
	lim   *policy.Limit // the limit the keys are rendered by
	seed  uint64
	slots atomic.Pointer[[ovSlots]ovSlot] // allocated at the first use
}

type ovSlot struct {
	e    atomic.Pointer[ovEntry]
	cand atomic.Uint64 // the hash of the last key that missed the slot
}

// ovEntry is an Index's answer for a key and what it makes of the
// limit's item: immutable.
type ovEntry struct {
	key      string
	version  uint64
	rule     *overrides.Rule // nil: the policy's limit
	expires  int64           // rule's expiry, Unix ms (0: never)
	st       LimitStatus     // the limit's status under rule (TokenCost 0)
	spec     *store.Spec
	capacity int64
	shadow   bool
}

// newOvCache returns the cache of limit lim, or nil when its rendered key
// may not determine the descriptors: two placeholders of its template
// with nothing between them that values escape (':', '%'), as
// "{a}{b}" or "{a}-{b}".
func newOvCache(lim *policy.Limit) *ovCache {
	t, seen := lim.Key, false
	for t != "" {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			break
		}
		if seen && !strings.ContainsAny(t[:i], ":%") {
			return nil
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 0 {
			return nil
		}
		t, seen = t[i+j+1:], true
	}
	return &ovCache{lim: lim, seed: rand.Uint64() | 1}
}

// slot returns key's slot and hash.
func (oc *ovCache) slot(key string) (*ovSlot, uint64) {
	s := oc.slots.Load()
	if s == nil {
		oc.slots.CompareAndSwap(nil, new([ovSlots]ovSlot))
		s = oc.slots.Load()
	}
	h := hashKey(key, oc.seed)
	return &s[h%ovSlots], h
}

// get returns the live entry of key at Index version v, or nil.
func (sl *ovSlot) get(key string, v uint64) *ovEntry {
	if e := sl.e.Load(); e != nil && e.version == v && e.key == key {
		return e
	}
	return nil
}

// offer stores e in sl (hash h) when the slot is free or stale at version
// v, or when the same key missed it last time.
func (sl *ovSlot) offer(e *ovEntry, h uint64, v uint64) {
	if old := sl.e.Load(); old == nil || old.version != v || sl.cand.Load() == h {
		sl.e.Store(e)
		return
	}
	sl.cand.Store(h)
}

// hashKey is a 64-bit hash of key (every byte counts; not for untrusted
// equality: entries compare keys).
func hashKey(key string, seed uint64) uint64 {
	const m = 0x9E3779B97F4A7C15
	h := seed ^ uint64(len(key))*m
	p := unsafe.StringData(key)
	n := len(key)
	for ; n >= 8; n -= 8 {
		b := unsafe.Slice(p, 8)
		h = (h ^ (uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)) * m
		h ^= h >> 31
		p = (*byte)(unsafe.Add(unsafe.Pointer(p), 8))
	}
	if n > 0 {
		b := unsafe.Slice(p, n)
		var w uint64
		for i, c := range b {
			w |= uint64(c) << (8 * i)
		}
		h = (h ^ w) * m
	}
	h ^= h >> 29
	return h * m
}

// entry makes the entry of key (borrowed: copied) for rule, resolved at
// Index version v for limit i.
func (c *compiled) entry(i int, key string, rule *overrides.Rule, v uint64) *ovEntry {
	e := &ovEntry{key: strings.Clone(key), version: v, rule: rule, st: c.status[i], spec: c.specs[i], capacity: c.status[i].Capacity}
	if rule != nil {
		e.expires = rule.ExpiresAt().UnixMilli()
		if rule.ExpiresAt().IsZero() {
			e.expires = 0
		}
		e.spec, e.capacity, e.shadow = c.overridden(i, rule, &e.st)
	}
	return e
}
