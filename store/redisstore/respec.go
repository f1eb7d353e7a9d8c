// Keys decided under several specs of a limit (store.Item.Base: an
// override's parameters): the spec marker a state carries and the base
// spec's marker the scripts are given.

package redisstore

import (
	"hash/fnv"
	"strings"

	"github.com/sluicehq/sluice/store"
)

// ConvertsSpecs implements store.SpecConverter: a key's state written
// under one spec of its limit is converted to another item's spec by the
// scripts, in the call that decides it, by store.Spec.Convert's rule (the
// SetLimit rule), as memstore converts it.
//
// The state format: a state written under a spec that is not its key's
// usual one (an item with a Base of another state) is preceded, after any
// penalty-box block ('!' and 16 hex digits), by a marker: '@', a digit n
// and n fields of 16 hex digits naming that spec (markOf). A state with
// no marker was written under its key's usual spec (Base when the item
// has one, else its Spec): states written before markers existed read as
// they did.
func (s *Store) ConvertsSpecs() bool { return true }

// markOf is sp's marker, as the scripts build it from the spec's
// parameter fields (fast.lua's markof): a token bucket's unit, capacity,
// rate num and den and MaxElapsed (the limb path's fixed point, so that
// two specs of one state have one marker); a window's length (its counts
// read the same under any limit); a quota's period and zone, hashed
// (quotaMark). "" for kinds with no state to convert (in-flight slots).
func (s *Store) markOf(sp *store.Spec) string {
	m := kindCodecs[sp.Kind].mark
	if m == nil {
		return ""
	}
	return m(s.paramsOf(sp))
}

func bucketMark(f []string) string { return "@5" + strings.Join(f[:5], "") }
func windowMark(f []string) string { return "@1" + f[1] }
func otherMark(f []string) string  { return "@1" + f[5] }

// quotaMark is the field naming a quota's state: its StateTag (period and
// zone), hashed to 16 hex digits.
func quotaMark(sp *store.Spec) string {
	h := fnv.New64a()
	h.Write([]byte(sp.StateTag()))
	return hex64(int64(h.Sum64()))
}

// baseMark is the marker of the usual spec of an item's key (base) when
// sp is another state of it (an override's), else "" (sp is the key's
// usual spec, or reads its state the same).
func (s *Store) baseMark(sp, base *store.Spec) string {
	if base == nil || base == sp || base.SameState(sp) {
		return ""
	}
	return s.markOf(base)
}
