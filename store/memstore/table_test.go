package memstore

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/store"
)

// The table against a Go map on random inserts, lookups, deletions (by
// scans) and growth, including tombstone reuse.
func TestTableAgainstMap(t *testing.T) {
	t.Parallel()
	checkTable(t, rand.New(rand.NewPCG(1, 2)), 200_000, 5000)
}

func FuzzTable(f *testing.F) {
	f.Add(uint64(1), uint16(500), uint16(50))
	f.Add(uint64(7), uint16(5000), uint16(3))
	f.Fuzz(func(t *testing.T, seed uint64, ops, keys uint16) {
		checkTable(t, rand.New(rand.NewPCG(seed, 3)), int(ops)%20000, int(keys)%3000+1)
	})
}

func checkTable(t *testing.T, rng *rand.Rand, ops, keys int) {
	tb := table{seed: maphash.MakeSeed()}
	ref := map[string]int64{}
	for op := range ops {
		k := fmt.Sprint("k", rng.IntN(keys))
		h := tb.hash(k)
		switch r := rng.IntN(10); {
		case r < 5: // lookup, insert when absent
			e := tb.get(h, k)
			v, ok := ref[k]
			if (e != nil) != ok || (ok && e.st[0] != v) {
				t.Fatalf("op %d get %s: table %v, map %v %v", op, k, e, v, ok)
			}
			if e == nil {
				v = int64(op)
				if tb.insert(h, k, entry{st: store.State{v}}) == nil {
					t.Fatal("insert failed")
				}
				ref[k] = v
			} else {
				e.st[0]++
				ref[k]++
			}
		case r < 7: // a scan that deletes some entries
			tb.scan(rng.IntN(64)+1, func(e *entry) bool {
				if e.st[0]%3 == 0 {
					for rk, rv := range ref {
						if te := tb.get(tb.hash(rk), rk); rv == e.st[0] && te != nil && &te.entry == e {
							delete(ref, rk)
							return true
						}
					}
				}
				return false
			})
		default: // lookup only
			e := tb.get(h, k)
			if v, ok := ref[k]; (e != nil) != ok || (ok && e.st[0] != v) {
				t.Fatalf("op %d get %s: table %v, map %v %v", op, k, e, v, ok)
			}
		}
		if tb.n != len(ref) {
			t.Fatalf("op %d: table holds %d, map %d", op, tb.n, len(ref))
		}
	}
	for k, v := range ref {
		if e := tb.get(tb.hash(k), k); e == nil || e.st[0] != v {
			t.Fatalf("final %s: %v, want %d", k, e, v)
		}
	}
	if tb.used*5 > len(tb.cells)*4+5 {
		t.Fatalf("load above 0.8: %d of %d", tb.used, len(tb.cells))
	}
}
