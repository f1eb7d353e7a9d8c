// Matching a request's descriptor against a domain's tree, as the reference service does.

package envoyrls

import "strings"

// How a level of a descriptor matched its node.
const (
	byValue   = iota // the node's exact value
	byWild           // the node's wildcard value
	byKeyOnly        // the node without a value
)

// step is one entry of a descriptor matched: the node and how.
type step struct {
	node *Node
	how  uint8
}

// matchPath walks a descriptor's entries down a domain's tree as the
// reference service does: each level's node and how it matched (nil when
// no node is reached, or the descriptor is deeper than the tree): within a level an exact value beats a
// wildcard (the first in file order that matches), which beats a key-only
// node.
func matchPath(root *Node, entries [][2]string, path []step) []step {
	node := root
	for _, e := range entries {
		var exact, wild, keyOnly *Node
		for _, c := range node.Children {
			if c.Key != e[0] {
				continue
			}
			switch {
			case c.Value == e[1]:
				exact = c
			case c.wild != nil && wildMatch(c.wild, e[1]):
				if wild == nil {
					wild = c
				}
			case c.Value == "":
				keyOnly = c
			}
		}
		switch {
		case exact != nil:
			node, path = exact, append(path, step{exact, byValue})
		case wild != nil:
			node, path = wild, append(path, step{wild, byWild})
		case keyOnly != nil:
			node, path = keyOnly, append(path, step{keyOnly, byKeyOnly})
		default:
			return nil
		}
	}
	if node == root {
		return nil
	}
	return path
}

// wildMatch reports whether value matches a wildcard split at its stars
// (parts): it starts with the first part, ends with the last, and holds
// the others in order between them; each * stands for any run of
// characters, empty included (the reference's wildcardMatch).
func wildMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) || len(value) < len(first)+len(last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
