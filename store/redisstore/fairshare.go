// Fair shares on Redis: the keys of a fair-share bucket's tenant set (in its
// hash slot) and the item fields the take script reads (fairshare.lua).

package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

// sharing reports whether item it is decided with its fair share: a token
// bucket whose spec has one, with a cost (a peek reads the bucket alone).
func sharing(it *store.Item) bool {
	return it.Spec.FairShare != nil && it.Cost != 0 && it.Spec.Kind.Shares()
}

// shareKeys are the keys of the tenant set of the bucket whose Redis key
// is k: a hash and a sorted set (fairshare.lua), both in k's hash slot, so
// that one script call decides the bucket and its set on a cluster. k's
// own hash tag when it has one; else k as the hash tag when it holds no
// '}'; else a tag of k's slot (slotTag).
func shareKeys(k string) (hash, zset string) {
	var base string
	switch {
	case hasHashTag(k):
		base = k
	case strings.IndexByte(k, '}') < 0:
		base = "{" + k + "}"
	default:
		base = "{" + slotTag(HashSlot(k)) + "}" + k
	}
	return base + ":fs", base + ":fz"
}

// hasHashTag reports whether Redis Cluster hashes key by a tag (a first
// '{' followed later by a '}' with something between).
func hasHashTag(key string) bool {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return false
	}
	return strings.IndexByte(key[i+1:], '}') > 0
}

var (
	slotTagsOnce sync.Once
	slotTags     []string
)

// slotTag is a short string whose hash slot is slot (built once, on the
// first key that needs it: one holding a '}' and no hash tag).
func slotTag(slot uint16) string {
	slotTagsOnce.Do(func() {
		slotTags = make([]string, 16384)
		left := 16384
		for i := 0; left > 0; i++ {
			t := strconv.FormatInt(int64(i), 36)
			if sl := crc16(t) & 16383; slotTags[sl] == "" {
				slotTags[sl] = t
				left--
			}
		}
	})
	return slotTags[slot]
}

// shareFields are the 6 fields the script reads after a fair-share item's
// cost: the index (1-based, into KEYS) of its set's hash (the sorted set
// is the next key), its holder (Item.Tenant), weight (decimal), active
// window (16 hex digits of ns), max_tenants (decimal) and the call's undo
// id ("" for none: see undoShares).
func shareFields(tail []string, it *store.Item, hashIndex int, undo string) []string {
	fs := it.Spec.FairShare
	return append(tail, itoa(int64(hashIndex)), it.Tenant, strconv.FormatUint(uint64(it.Weight), 10),
		hex64(int64(fs.ActiveWindow)), itoa(int64(fs.MaxTenants)), undo)
}

// undoShareScript puts back the virtual time a take wrote for a holder
// (KEYS[1] its set's hash) under undo id ARGV[1], when the record still
// carries that id (no other vtat was written since): the holder is
// ARGV[2] or, folded past max_tenants, the "other" holder. The touch
// stays (a request's holder is touched whether it is admitted or not).
var undoShareScript = rueidis.NewLuaScript(`
for _, f in ipairs({'h' .. ARGV[2], 'h'}) do
  local rec = redis.call('HGET', KEYS[1], f)
  if rec and #rec > 56 and string.sub(rec, 57) == ARGV[1] then
    redis.call('HSET', KEYS[1], f, string.sub(rec, 1, 16) .. string.sub(rec, 41, 56) .. string.sub(rec, 33, 40))
    return 1
  end
end
return 0`)

// crossShares reports whether a request over several hash slots has an
// item decided with its fair share: its calls then carry an undo id.
func crossShares(items []store.Item) bool {
	for i := range items {
		if sharing(&items[i]) {
			return true
		}
	}
	return false
}

// undoShares puts back the virtual times that the groups which admitted a
// request refused elsewhere wrote under undo id (undoShareScript): a
// refused request writes no virtual time, on a cluster too. A virtual time
// that moved again since (the holder admitted once more in between, one
// round trip) is kept.
func (s *Store) undoShares(ctx context.Context, items []store.Item, groups [][]int, ok []bool, undo string) {
	for g, idx := range groups {
		if !ok[g] {
			continue
		}
		for _, i := range idx {
			if it := &items[i]; sharing(it) {
				h, _ := shareKeys(s.Key(it.Spec.Kind, it.Key))
				if err := undoShareScript.Exec(ctx, s.c, []string{h}, []string{undo, it.Tenant}).Error(); err != nil {
					s.fail("take", err)
				}
			}
		}
	}
}
