// A key's decision by its kind's rule (step, decide, penalize), and the
// keys handed back to callers (ownKey).

package memstore

import (
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// ownKey replaces a borrowed key by a string the caller may keep: the
// table's copy when entry e still holds this key (an entry evicted to make
// room holds none), else a fresh copy.
func ownKey(it *store.Item, e *tentry) {
	if e != nil && e.key == it.Key {
		it.Key = e.key
	} else {
		it.Key = strings.Clone(it.Key)
	}
}

// ownKeys replaces borrowed keys by copies (on paths that return early).
func ownKeys(items []store.Item) {
	for i := range items {
		ownKey(&items[i], nil)
	}
}

// step applies it to the key's state e (exists tells whether there is one)
// by the kind's rule. (it by pointer: an Item is some twenty words.)
func step(it *store.Item, e entry, exists bool, d, wall int64) (entry, sluice.Decision) {
	if it.Reserve != 0 { // a priority class (none: no more work than before)
		return stepReserved(it, e, exists, d, wall)
	}
	st, dec := it.Spec.Step(e.st, exists, store.Now{Mono: d, Wall: wall}, it.Cost)
	return entry{st: st, idle: idleAt(d, int64(dec.ResetAfter))}, dec
}

// stepReserved is step for an item of a priority class (Item.Reserve).
func stepReserved(it *store.Item, e entry, exists bool, d, wall int64) (entry, sluice.Decision) {
	st, dec := it.Spec.StepReserved(e.st, exists, store.Now{Mono: d, Wall: wall}, it.Cost, it.Reserve)
	return entry{st: st, idle: idleAt(d, int64(dec.ResetAfter))}, dec
}

// decide is step, or for an item with a MaxWait the kind's Book (wait:
// how long until its cost is there); an item of a fair-share spec is
// decided with its key's tenant set in shd (fairshare.go).
func decide(shd *shard, it *store.Item, e entry, exists bool, d, wall int64) (entry, sluice.Decision, time.Duration) {
	if it.Spec.FairShare != nil && it.Cost > 0 {
		return shd.decideShare(it, e, exists, d, wall)
	}
	if it.MaxWait <= 0 || it.Cost == 0 {
		next, dec := step(it, e, exists, d, wall)
		return next, dec, 0
	}
	st, dec, wait := it.Spec.BookReserved(e.st, exists, store.Now{Mono: d, Wall: wall}, it.Cost, it.MaxWait, it.Reserve)
	return entry{st: st, idle: idleAt(d, int64(dec.ResetAfter))}, dec, wait
}

// penalize is Spec.Penalize for item it on entry e (nil: a new key) of
// locked shard shd at d: a block it starts is kept with the entry. (A
// refusal always finds an entry: a new key admits any cost within its
// capacity.)
func penalize(shd *shard, e *tentry, it *store.Item, dec sluice.Decision, d, wall int64) sluice.Decision {
	cost := it.Cost
	if it.Reserve != 0 || (it.Spec.FairShare != nil && shd.shareRefused(it.Key)) {
		cost = 0 // a class's or a share's refusal starts no block (store.Item.Reserve, fairshare.go)
	}
	dec, until, start := it.Spec.Penalize(dec, shd.m.blockOf(e, d), store.Now{Mono: d, Wall: wall}, cost)
	if start && e != nil {
		shd.m.setBlock(e, until)
	}
	return dec
}

// idleAt is d + wait, saturating: a bucket deep in debt reports waits near
// the largest duration, and an overflow would make it look idle (and be
// evicted, forgetting the debt).
func idleAt(d, wait int64) int64 {
	if wait > math.MaxInt64-d {
		return math.MaxInt64
	}
	return d + wait
}
