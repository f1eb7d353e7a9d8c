// Package suggest finds the known name nearest to a misspelled one, for
// "did you mean ...?" hints in configuration errors.
package suggest

import "strings"

// DidYouMean is " (did you mean c?)" for the candidate c nearest to s (see
// Nearest), else the empty string.
func DidYouMean(s string, candidates ...[]string) string {
	if c := Nearest(s, candidates...); c != "" {
		return " (did you mean " + c + "?)"
	}
	return ""
}

// Nearest returns the candidate closest to s by optimal string alignment
// distance (Levenshtein's insertions, deletions and substitutions, plus
// transpositions of adjacent bytes), ignoring the case of s (candidates
// are lower case), when that
// distance is at most max(2, len(s)/3); "" when no candidate is that close.
// Of equally close candidates the first wins.
func Nearest(s string, candidates ...[]string) string {
	limit := max(2, len(s)/3)
	best, bestD := "", limit+1
	s = strings.ToLower(s)
	for _, cs := range candidates {
		for _, c := range cs {
			if d := Distance(s, c, bestD); d < bestD {
				best, bestD = c, d
			}
		}
	}
	return best
}

// Distance is the optimal string alignment distance between a and b, or
// any value >= bound when it is at least bound. Its cost is
// O(len(a)*len(b)), and O(1) when the lengths alone differ by bound.
func Distance(a, b string, bound int) int {
	if d := len(a) - len(b); d >= bound || -d >= bound {
		return bound
	}
	// rows[i%3][j] is the distance between a[:i] and b[:j]; known names
	// fit the array, so the common case does not allocate.
	var buf [3 * 32]int
	cells := buf[:]
	if w := len(b) + 1; 3*w > len(buf) {
		cells = make([]int, 3*w)
	}
	w := len(b) + 1
	rows := [3][]int{cells[:w], cells[w : 2*w], cells[2*w : 3*w]}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur, prev, prev2 := rows[i%3], rows[(i-1)%3], rows[(i+1)%3]
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := 1
			if a[i-1] == b[j-1] {
				sub = 0
			}
			d := min(prev[j]+1, cur[j-1]+1, prev[j-1]+sub)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d = min(d, prev2[j-2]+1)
			}
			cur[j] = d
		}
	}
	return rows[len(a)%3][len(b)]
}
