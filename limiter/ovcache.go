// The per-limit cache of resolved overrides: from a request's rendered key
// to the override that decides it and the limit's status under it.

package limiter

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// ovSlots is the number of entries of a limit's cache (direct-mapped): its
// memory is bounded whatever the number of keys.
const ovSlots = 1 << ovBits

const ovBits = 9

// ovCache keeps, per limit of a compiled policy whose key determines the
// descriptors its overrides can match (keyed), the answer of the limit's
// Index for recent keys. An entry holds while the Index's Version is the
// one it was resolved under, and up to its rule's expiry: Put, Delete,
// Sweep and SetPolicy change the Version, so a check after one of them
// resolves anew. A key takes a slot that another live key holds only when
// it misses it twice in a row (so that a flood of new keys neither
// allocates nor evicts hot ones).
type ovCache struct {
	seed  uint64
	slots atomic.Pointer[[ovSlots]ovSlot] // allocated at the first use
}

type ovSlot struct {
	e    atomic.Pointer[ovEntry]
	cand atomic.Uint64 // the hash of the last key that missed the slot
}

// ovEntry is an Index's answer for a key and what it makes of the
// limit's item, worked out once so that a check under it only copies it
// (overridesPass): immutable.
type ovEntry struct {
	key     string
	version uint64
	rule    *overrides.Rule // nil: the policy's limit
	expires int64           // rule's expiry, Unix ms (0: never)
	st      LimitStatus     // the limit's status under rule (TokenCost 0)
	// spec is the item's spec under rule, nil when it is the policy's
	// (the item is left as plan made it); base its Item.Base (the
	// policy's spec on a store that converts specs, else nil); rekey,
	// that the key is rendered anew under spec's state tag (a store that
	// does not convert, and another tag).
	spec  *store.Spec
	base  *store.Spec
	rekey bool
	// maxCost is the largest cost the item may have without a CostError
	// (overrideCostError): the capacity under rule, or math.MaxInt64 for
	// an in-flight cap, a shadow limit, a deny or an unlimited rule.
	maxCost int64
	// odd: rule makes the item shadow or decides it without the store.
	odd bool
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
	return &ovCache{seed: rand.Uint64() | 1}
}

// cachedEntry returns the live entry of item j (of limit i) in the
// limit's cache, or nil: one, perhaps expired, held under the Index's
// version for the caller's part of the item's key.
func (c *compiled) cachedEntry(i, j int, sc *scratch) *ovEntry {
	oc := c.ovc[i]
	if oc == nil {
		return nil
	}
	s := oc.slots.Load()
	if s == nil {
		return nil
	}
	key := sc.cacheKey(j)
	if e := s[slotOf(hashKey(key, oc.seed))].e.Load(); e != nil && e.version == c.ix[i].Version() && e.key == key {
		return e
	}
	return nil
}

// cacheKey is the caller's part of item j's key (borrowed from sc.key).
func (sc *scratch) cacheKey(j int) string {
	start := sc.user[j]
	if j > 0 {
		start += sc.ends[j-1]
	}
	k := sc.key[start:sc.ends[j]]
	return unsafe.String(unsafe.SliceData(k), len(k))
}

// resolveEntry returns the entry of item j (of limit i) at now: e when it
// has not expired, else the Index's answer, kept in the cache when the
// limit has one (and the answer is of the limiter's policy limit), else
// in sc.ovTmp (valid until the next call).
func (c *compiled) resolveEntry(i, j int, req *Request, sc *scratch, e *ovEntry, now time.Time) *ovEntry {
	if e != nil && now.UnixMilli() < e.expires {
		return e
	}
	rule, v, lim := c.ix[i].ResolveVersion(req.Descriptors, now)
	if oc := c.ovc[i]; oc != nil && lim == c.p.Limits[i] {
		key := sc.cacheKey(j)
		if sl, h := oc.slot(key); sl.takes(h, v) {
			e = c.entry(i, key, rule, v)
			sl.e.Store(e)
			return e
		}
	}
	sc.ovTmp = ovEntry{}
	c.fillEntry(&sc.ovTmp, i, rule, v)
	return &sc.ovTmp
}

// slot returns key's slot and hash.
func (oc *ovCache) slot(key string) (*ovSlot, uint64) {
	s := oc.slots.Load()
	if s == nil {
		oc.slots.CompareAndSwap(nil, new([ovSlots]ovSlot))
		s = oc.slots.Load()
	}
	h := hashKey(key, oc.seed)
	return &s[slotOf(h)], h
}

// takes reports whether sl takes a new entry of hash h at Index version
// v: when the slot is free or stale, or when the same key missed it last
// time (else it remembers h).
func (sl *ovSlot) takes(h uint64, v uint64) bool {
	if old := sl.e.Load(); old == nil || old.version != v || sl.cand.Load() == h {
		return true
	}
	sl.cand.Store(h)
	return false
}

// hashKey is a 64-bit hash of key whose top bits depend on every byte
// (entries compare keys: a collision costs a resolution, never a wrong
// answer).
func hashKey(key string, seed uint64) uint64 {
	const m = 0x9E3779B97F4A7C15
	n := len(key)
	h := seed ^ uint64(n)
	switch {
	case n >= 8:
		for i := 0; i+8 < n; i += 8 {
			h = (h ^ le64(key[i:])) * m
		}
		h = (h ^ le64(key[n-8:])) * m // (the last 8 bytes, perhaps read already)
	case n >= 4:
		h = (h ^ uint64(le32(key)) ^ uint64(le32(key[n-4:]))<<32) * m
	case n > 0:
		h = (h ^ uint64(key[0]) ^ uint64(key[n/2])<<8 ^ uint64(key[n-1])<<16) * m
	}
	return h
}

// slotOf is the slot of hash h: its top bits.
func slotOf(h uint64) uint64 { return h >> (64 - ovBits) }

// entry makes the entry of key (borrowed: copied) for rule, resolved at
// Index version v for limit i.
func (c *compiled) entry(i int, key string, rule *overrides.Rule, v uint64) *ovEntry {
	e := &ovEntry{key: strings.Clone(key)}
	c.fillEntry(e, i, rule, v)
	return e
}

// fillEntry sets e (but its key) for rule, resolved at Index version v for
// limit i.
func (c *compiled) fillEntry(e *ovEntry, i int, rule *overrides.Rule, v uint64) {
	e.version, e.rule, e.st = v, rule, c.status[i]
	if rule == nil {
		return
	}
	if t := rule.ExpiresAt(); !t.IsZero() {
		e.expires = t.UnixMilli()
	}
	spec, capacity, shadow := c.overridden(i, rule, &e.st)
	e.maxCost, e.odd = capacity, shadow || skipped(rule)
	if c.conc[i] || e.odd {
		e.maxCost = math.MaxInt64
	}
	if spec != c.specs[i] {
		e.spec = spec
		if c.converts {
			e.base = c.specs[i]
		} else {
			e.rekey = spec.StateTag() != c.specs[i].StateTag()
		}
	}
}

// le64 and le32 read the first 8 and 4 bytes of s, little-endian.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
