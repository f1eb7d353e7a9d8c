// Fair shares in memory: each fair-share key's tenant set (holders by
// last_seen, their weights' sum, each holder's virtual time), the touch
// and expiry of store.Spec.DecideShare's rule, and the write of a holder's
// virtual time when the whole request is admitted.

package memstore

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// holder is one share holder of a tenant set, in the set's list ordered
// by lastSeen (oldest first).
type holder struct {
	name       string
	lastSeen   int64 // ns since t0
	weight     uint32
	vtat       int64 // ns since t0
	prev, next *holder
}

// fairSet is a key's tenant set. pend is the holder whose virtual time the
// last decision on the key would write (nil: none), pendVT that time, and
// refused whether that decision was a share's refusal: a request is
// decided and committed under its shards' locks, so the last decision on
// the key is the committed request's.
type fairSet struct {
	key        string
	holders    map[string]*holder
	head, tail *holder
	sum        uint64 // the holders' weights
	window     int64  // the spec's ActiveWindow (ns) at the last decision
	pend       *holder
	pendVT     int64
	refused    bool
	prev, next *fairSet // the shard's sets by last touch (oldest first)
}

// fairSets is a shard's tenant sets, by key and by last touch.
type fairSets struct {
	byKey      map[string]*fairSet
	head, tail *fairSet
}

// unlink removes h from the set's list.
func (fs *fairSet) unlink(h *holder) {
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		fs.head = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else {
		fs.tail = h.prev
	}
	h.prev, h.next = nil, nil
}

// pushBack appends h to the set's list (its newest holder).
func (fs *fairSet) pushBack(h *holder) {
	h.prev, h.next = fs.tail, nil
	if fs.tail != nil {
		fs.tail.next = h
	} else {
		fs.head = h
	}
	fs.tail = h
}

// expire removes every holder last seen at or before d − window.
func (fs *fairSet) expire(f *store.FairShare, d int64) {
	for h := fs.head; h != nil && f.Expired(h.lastSeen, d); h = fs.head {
		fs.unlink(h)
		delete(fs.holders, h.name)
		fs.sum -= uint64(h.weight)
	}
}

// touch is the rule's step 2 for a request of tenant with weight w at d:
// the holder it counts for (itself, or store.OtherHolder past
// MaxTenants), last seen now with its weight.
func (fs *fairSet) touch(f *store.FairShare, tenant string, w uint32, d int64) *holder {
	h, present := fs.holders[tenant]
	name := f.Holder(tenant, present, len(fs.holders))
	w = store.HolderWeight(w, name != tenant)
	if name != tenant {
		h, present = fs.holders[name]
	}
	if !present {
		h = &holder{name: strings.Clone(name)}
		fs.holders[h.name] = h
	} else {
		fs.unlink(h)
		fs.sum -= uint64(h.weight)
	}
	h.lastSeen, h.weight = d, w
	fs.sum += uint64(w)
	fs.pushBack(h)
	return h
}

// set returns key's tenant set, made the shard's most recently touched,
// creating it when there is none; and frees the sets, oldest touched
// first, whose every holder has expired at d.
func (sets *fairSets) set(key string, f *store.FairShare, d int64) *fairSet {
	fs := sets.byKey[key]
	if fs == nil {
		if sets.byKey == nil {
			sets.byKey = map[string]*fairSet{}
		}
		fs = &fairSet{key: strings.Clone(key), holders: map[string]*holder{}}
		sets.byKey[fs.key] = fs
	} else {
		sets.unlink(fs)
	}
	fs.window = int64(f.ActiveWindow)
	sets.pushBack(fs)
	for o := sets.head; o != fs && (o.tail == nil || o.tail.lastSeen <= d-o.window); o = sets.head {
		sets.unlink(o)
		delete(sets.byKey, o.key)
	}
	return fs
}

func (sets *fairSets) unlink(fs *fairSet) {
	if fs.prev != nil {
		fs.prev.next = fs.next
	} else {
		sets.head = fs.next
	}
	if fs.next != nil {
		fs.next.prev = fs.prev
	} else {
		sets.tail = fs.prev
	}
	fs.prev, fs.next = nil, nil
}

func (sets *fairSets) pushBack(fs *fairSet) {
	fs.prev, fs.next = sets.tail, nil
	if sets.tail != nil {
		sets.tail.next = fs
	} else {
		sets.head = fs
	}
	sets.tail = fs
}

// decideShare is decide for an item of a fair-share spec taking cost > 0
// (store.Spec.DecideShare) in locked shard shd at d: its key's tenant set
// expired and touched now (kept whether the request is admitted or not),
// the holder's new virtual time kept pending until commitShare.
func (shd *shard) decideShare(it *store.Item, e entry, exists bool, d, wall int64) (entry, sluice.Decision, time.Duration) {
	f := it.Spec.FairShare
	fs := shd.fair.set(it.Key, f, d)
	fs.expire(f, d)
	h := fs.touch(f, it.Tenant, it.Weight, d)
	maxWait := it.MaxWait
	o := it.Spec.DecideShare(e.st, exists, store.Now{Mono: d, Wall: wall}, it.Cost, maxWait, it.Reserve, h.vtat, h.weight, fs.sum)
	fs.pend, fs.pendVT, fs.refused = nil, 0, o.ShareRefused
	if o.Contended && o.Decision.Allowed {
		fs.pend, fs.pendVT = h, o.VTAT
	}
	return entry{st: o.State, idle: idleAt(d, int64(o.Decision.ResetAfter))}, o.Decision, o.Wait
}

// commitShare writes, for an admitted item of a fair-share spec, the
// virtual time its decision left pending (none when it was uncontended).
func (shd *shard) commitShare(key string) {
	if fs := shd.fair.byKey[key]; fs != nil && fs.pend != nil {
		fs.pend.vtat = fs.pendVT
		fs.pend = nil
	}
}

// shareRefused reports whether the last decision on key, of a fair-share
// spec, was a refusal by its holder's share (which starts no penalty box).
func (shd *shard) shareRefused(key string) bool {
	fs := shd.fair.byKey[key]
	return fs != nil && fs.refused
}
