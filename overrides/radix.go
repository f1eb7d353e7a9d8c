// A compressed trie of prefixes, for the prefix values of overrides.
package overrides

import (
	"bytes"
	"slices"
	"strings"
)

// radix maps prefixes to values; walk visits, shortest first, the values
// of every stored prefix of a string. Not safe for concurrent writes (the
// Index's lock guards it).
type radix struct {
	root rnode
	n    int
}

type rnode struct {
	label string // the edge from the parent
	val   pval
	has   bool
	first []byte   // the first byte of each kid's label, ascending
	kids  []*rnode // in the order of first
}

// child returns the index of the kid whose label starts with c, and
// whether there is one (else the index it would have).
func (n *rnode) child(c byte) (int, bool) {
	if i := bytes.IndexByte(n.first, c); i >= 0 {
		return i, true
	}
	lo := 0
	for lo < len(n.first) && n.first[lo] < c {
		lo++
	}
	return lo, false
}

// setKid puts kid at index i (ins: inserted there, else replacing).
func (n *rnode) setKid(i int, kid *rnode, ins bool) {
	if ins {
		n.kids = slices.Insert(n.kids, i, kid)
		n.first = slices.Insert(n.first, i, kid.label[0])
		return
	}
	n.kids[i], n.first[i] = kid, kid.label[0]
}

// delKid removes the kid at index i.
func (n *rnode) delKid(i int) {
	n.kids = slices.Delete(n.kids, i, i+1)
	n.first = slices.Delete(n.first, i, i+1)
}

// get returns the value stored for exactly p.
func (t *radix) get(p string) (pval, bool) {
	n := &t.root
	for p != "" {
		i, ok := n.child(p[0])
		if !ok || !strings.HasPrefix(p, n.kids[i].label) {
			return pval{}, false
		}
		n = n.kids[i]
		p = p[len(n.label):]
	}
	return n.val, n.has
}

// put stores v for p, replacing a value stored for p.
func (t *radix) put(p string, v pval) {
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
			n.setKid(i, &rnode{label: p, val: v, has: true}, true)
			t.n++
			return
		}
		k := n.kids[i]
		c := commonPrefix(p, k.label)
		if c < len(k.label) { // split k at c
			mid := &rnode{label: k.label[:c], kids: []*rnode{k}, first: []byte{k.label[c]}}
			k.label = k.label[c:]
			n.setKid(i, mid, false)
			k = mid
		}
		n, p = k, p[c:]
	}
}

// del removes the value stored for p; false when there was none.
func (t *radix) del(p string) bool {
	var path [64]*rnode
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
	n.val, n.has = pval{}, false
	t.n--
	// Prune: an empty leaf goes; a valueless node with one kid merges
	// into it (the root stays).
	for len(stack) > 0 && n != &t.root {
		parent := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, _ := parent.child(n.label[0])
		switch {
		case !n.has && len(n.kids) == 0:
			parent.delKid(i)
		case !n.has && len(n.kids) == 1:
			k := n.kids[0]
			k.label = n.label + k.label
			parent.setKid(i, k, false)
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
func (t *radix) walk(s string, f func(n int, v pval) bool) {
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
func (t *radix) each(f func(p string, v pval)) {
	var rec func(n *rnode, p string)
	rec = func(n *rnode, p string) {
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
