package overrides

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestRadixAgainstMap checks the trie against a map under random puts and
// deletes: get, the prefixes walk visits (shortest first), and its shape
// (no empty leaf, no valueless node with one kid, kids in byte order).
func TestRadixAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alpha := "abc"
	word := func() string {
		b := make([]byte, 1+rng.IntN(5))
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		return string(b)
	}
	for round := range 200 {
		var tr radix
		ref := map[string]int{}
		for op := range 60 {
			w := word()
			if rng.IntN(3) == 0 {
				_, had := ref[w]
				if tr.del(w) != had {
					t.Fatalf("round %d: del(%q) disagrees", round, w)
				}
				delete(ref, w)
			} else {
				ref[w] = op
				tr.put(w, pval{r: &Rule{ttl: int64(op)}})
			}
			if tr.n != len(ref) {
				t.Fatalf("round %d: n %d, want %d", round, tr.n, len(ref))
			}
			checkShape(t, &tr.root, true)
			s := word() + word()
			var got, want []string
			tr.walk(s, func(n int, v pval) bool {
				got = append(got, s[:n])
				if v.r.ttl != int64(ref[s[:n]]) {
					t.Fatalf("walk: value of %q is %d, want %d", s[:n], v.r.ttl, ref[s[:n]])
				}
				return true
			})
			for k := range ref {
				if strings.HasPrefix(s, k) {
					want = append(want, k)
				}
			}
			slices.SortFunc(want, func(a, b string) int { return len(a) - len(b) })
			if !slices.Equal(got, want) {
				t.Fatalf("round %d: walk(%q) = %q, want %q", round, s, got, want)
			}
			for k, v := range ref {
				if pv, ok := tr.get(k); !ok || pv.r.ttl != int64(v) {
					t.Fatalf("round %d: get(%q) lost", round, k)
				}
			}
			var each []string
			tr.each(func(p string, _ pval) { each = append(each, p) })
			if len(each) != len(ref) {
				t.Fatalf("each visits %d, want %d", len(each), len(ref))
			}
		}
	}
}

func checkShape(t *testing.T, n *rnode, root bool) {
	t.Helper()
	if !root && !n.has && len(n.kids) < 2 {
		t.Fatalf("node %q: no value and %d kids", n.label, len(n.kids))
	}
	if len(n.first) != len(n.kids) {
		t.Fatalf("node %q: %d first bytes for %d kids", n.label, len(n.first), len(n.kids))
	}
	for i, k := range n.kids {
		if k.label == "" || k.label[0] != n.first[i] || i > 0 && n.first[i-1] >= n.first[i] {
			t.Fatalf("node %q: kid %d %q out of order", n.label, i, k.label)
		}
		checkShape(t, k, false)
	}
}
