// A compressed trie of prefixes, for the prefix values of overrides.
package overrides

import "strings"

// radix maps prefixes to values; walk visits, shortest first, the values
// of every stored prefix of a string. Not safe for concurrent writes (the
// Index's lock guards it).
type radix[V any] struct {
	root rnode[V]
	n    int
}

type rnode[V any] struct {
	label string // the edge from the parent
	val   V
	has   bool
	kids  []*rnode[V] // by first byte of label, ascending
}

// child returns the index of the kid whose label starts with c, and
// whether there is one.
func (n *rnode[V]) child(c byte) (int, bool) {
	lo, hi := 0, len(n.kids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.kids[m].label[0] < c {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.kids) && n.kids[lo].label[0] == c
}

// get returns the value stored for exactly p.
func (t *radix[V]) get(p string) (V, bool) {
	n := &t.root
	for p != "" {
		i, ok := n.child(p[0])
		if !ok || !strings.HasPrefix(p, n.kids[i].label) {
			var zero V
			return zero, false
		}
		n = n.kids[i]
		p = p[len(n.label):]
	}
	return n.val, n.has
}

// put stores v for p, replacing a value stored for p.
func (t *radix[V]) put(p string, v V) {
	n := &t.root
	for {
		if p == "" {
			if !n.has {
				t.n++
			}
			n.val, n.has = v, true
			return
		}
		i, ok := n.child(p[0])
		if !ok {
			kid := &rnode[V]{label: p, val: v, has: true}
			n.kids = append(n.kids, nil)
			copy(n.kids[i+1:], n.kids[i:])
			n.kids[i] = kid
			t.n++
			return
		}
		k := n.kids[i]
		c := commonPrefix(p, k.label)
		if c < len(k.label) { // split k at c
			mid := &rnode[V]{label: k.label[:c], kids: []*rnode[V]{k}}
			k.label = k.label[c:]
			n.kids[i] = mid
			k = mid
		}
		n, p = k, p[c:]
	}
}

// del removes the value stored for p; false when there was none.
func (t *radix[V]) del(p string) bool {
	var path [64]*rnode[V]
	stack := path[:0]
	n := &t.root
	for p != "" {
		i, ok := n.child(p[0])
		if !ok || !strings.HasPrefix(p, n.kids[i].label) {
			return false
		}
		stack = append(stack, n)
		n = n.kids[i]
		p = p[len(n.label):]
	}
	if !n.has {
		return false
	}
	var zero V
	n.val, n.has = zero, false
	t.n--
	// Prune: an empty leaf goes; a valueless node with one kid merges
	// into it (the root stays).
	for len(stack) > 0 && n != &t.root {
		parent := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, _ := parent.child(n.label[0])
		switch {
		case !n.has && len(n.kids) == 0:
			parent.kids = append(parent.kids[:i], parent.kids[i+1:]...)
		case !n.has && len(n.kids) == 1:
			k := n.kids[0]
			k.label = n.label + k.label
			parent.kids[i] = k
			return true
		default:
			return true
		}
		n = parent
	}
	return true
}

// walk calls f for every stored prefix of s, shortest first, with the
// prefix's length, until f returns false.
func (t *radix[V]) walk(s string, f func(n int, v V) bool) {
	n, depth := &t.root, 0
	for {
		if n.has && !f(depth, n.val) {
			return
		}
		rest := s[depth:]
		if rest == "" {
			return
		}
		i, ok := n.child(rest[0])
		if !ok || !strings.HasPrefix(rest, n.kids[i].label) {
			return
		}
		n = n.kids[i]
		depth += len(n.label)
	}
}

// each calls f for every stored prefix and value, in no order.
func (t *radix[V]) each(f func(p string, v V)) {
	var rec func(n *rnode[V], p string)
	rec = func(n *rnode[V], p string) {
		p += n.label
		if n.has {
			f(p, n.val)
		}
		for _, k := range n.kids {
			rec(k, p)
		}
	}
	rec(&t.root, "")
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}
