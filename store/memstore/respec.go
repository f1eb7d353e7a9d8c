// Keys decided under several specs (store.Item.Base: an override's
// parameters): the spec each key's state was written under, and its
// conversion to the spec of the item deciding it.

package memstore

import (
	"unsafe"

	"github.com/sluicehq/sluice/store"
)

// ConvertsSpecs implements store.SpecConverter: a key's state written
// under one spec is converted to another item's spec by store.Spec.Convert
// (the SetLimit rule).
func (s *Store) ConvertsSpecs() bool { return true }

// asSpec returns the state cur of key's entry e (nil: none) as an item of
// spec sp reads it (base: the key's usual spec, nil when sp is), and
// whether the key has a state under sp. A key's state was written under
// the spec the shard's specs map holds for it, else under its usual spec
// (base, or sp itself). A state converted is kept at once, under sp (its
// peek), so that a change of a key's spec takes effect at the key's first
// decision after it, admitted or not. Shard locked.
func (shd *shard) asSpec(e *tentry, sp, base *store.Spec, cur entry, d, wall int64) (entry, bool) {
	if e != nil && shd.written(e, sp) {
		return cur, true
	}
	return shd.respec(e, sp, base, cur, d, wall)
}

// written reports whether the memo of the shard's specs says entry e's
// state is written under sp (the same bytes as the memo's key): asSpec's
// answer for a hot key under an override's spec, small enough to inline
// at take1's call. Shard locked.
func (shd *shard) written(e *tentry, sp *store.Spec) bool {
	m := &shd.memo
	return m.sp == sp && sp != nil && unsafe.StringData(m.key) == unsafe.StringData(e.key) && len(m.key) == len(e.key)
}

// respec is asSpec when the memo does not tell the key is written under
// sp. Shard locked.
func (shd *shard) respec(e *tentry, sp, base *store.Spec, cur entry, d, wall int64) (entry, bool) {
	if e == nil {
		return cur, false
	}
	if base == nil && len(shd.specs) == 0 {
		return cur, true
	}
	w, ok := shd.specOf(e.key)
	if !ok {
		w = base
	}
	if w == sp || w == nil || w.SameState(sp) {
		if ok && w != sp {
			shd.wrote(e.key, sp, base) // (the same state, under sp's name)
		}
		return cur, true
	}
	st, live := sp.Convert(w, cur.st, true, store.Now{Mono: d, Wall: wall})
	cur.st = st
	e.entry, _ = step(&store.Item{Spec: sp}, cur, live, d, wall) // (a new state kept as a state: the same)
	shd.wrote(e.key, sp, base)
	return e.entry, true
}

// wrote records that key's state is written under sp (base: the key's
// usual spec, nil when sp is). key must be the table's copy (or one the
// caller does not reuse). Shard locked. The decision paths call it through
// asSpec (for a key that has a state) and for a key they create.
func (shd *shard) wrote(key string, sp, base *store.Spec) {
	if base != nil && !base.SameState(sp) {
		if shd.specs == nil {
			shd.specs = map[string]*store.Spec{}
		}
		shd.specs[key] = sp
		shd.memo = specMemo{key: key, sp: sp, set: true}
		if n := len(shd.specs); n > 1024 && n > 2*shd.m.n {
			shd.pruneSpecs()
		}
		return
	}
	if len(shd.specs) > 0 {
		delete(shd.specs, key)
	}
	shd.memo = specMemo{key: key, set: true}
}

// specMemo is a shard's last answer of its specs map: set, the spec
// specs holds for key (nil: none). It is the map's answer while set:
// every change of the map updates or clears it.
type specMemo struct {
	key string
	sp  *store.Spec
	set bool
}

// specOf is shd.specs[key], from the memo when it holds key (a hot key
// under an override's spec costs no map lookup). Shard locked.
func (shd *shard) specOf(key string) (*store.Spec, bool) {
	if m := &shd.memo; m.set && m.key == key {
		return m.sp, m.sp != nil
	}
	sp, ok := shd.specs[key]
	shd.memo = specMemo{key: key, sp: sp, set: true}
	return sp, ok
}

// pruneSpecs forgets the specs of keys the shard no longer holds (evicted
// keys: a key created again starts anew, whatever its spec). Shard locked.
func (shd *shard) pruneSpecs() {
	shd.memo = specMemo{}
	for k := range shd.specs {
		if shd.m.get(shd.m.hash(k), k) == nil {
			delete(shd.specs, k)
		}
	}
}
