// Listing a limit's overrides, page by page.
package overrides

import (
	"container/heap"
	"encoding/base64"
	"time"
)

// MaxPage is the most overrides one List call returns.
const MaxPage = 1000

// ListOptions selects a page of List.
type ListOptions struct {
	// Match keeps only the overrides whose Match has each of these
	// entries exactly (the value as written: "premium_*" selects the
	// override with that prefix, not the ones it would match).
	Match map[string]string
	// Cursor is the Next of the previous page ("" for the first).
	Cursor string
	// N is the page's size: 1 to MaxPage; 0 is MaxPage.
	N int
	// Now is the time expiry is judged at: expired overrides are not
	// listed. Zero is time.Now().
	Now time.Time
}

// List returns a page of limit name's live overrides, in canonical-match
// order (CanonicalMatch, ascending: the order is stable across calls and
// changes), each with this instance's counters, and the cursor of the
// next page ("" after the last). An override created or deleted between
// calls is listed or not according to where it falls against the
// cursor. The error matches ErrBadRequest for a malformed cursor or an N
// out of range. Its cost is proportional to the limit's overrides (each
// page looks at all of them).
func (s *Set) List(name string, opt ListOptions) (page []Listed, next string, err error) {
	if opt.N == 0 {
		opt.N = MaxPage
	}
	if opt.N < 1 || opt.N > MaxPage {
		return nil, "", errorf(ErrBadRequest, name, "n", "n %d must be 1 to %d", opt.N, MaxPage)
	}
	after, err := base64.RawURLEncoding.DecodeString(opt.Cursor)
	if err != nil {
		return nil, "", errorf(ErrBadRequest, name, "cursor", "malformed cursor %q", opt.Cursor)
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	ix := (*s.idx.Load())[name]
	if ix == nil {
		return nil, "", nil
	}
	ms := opt.Now.UnixMilli()
	// The N lowest canonical matches above the cursor, and whether there
	// are more.
	h := &pageHeap{}
	more := false
	ix.mu.RLock()
	for _, g := range ix.groups {
		g.each(func(r *Rule) {
			if !r.alive(ms) {
				return
			}
			m := r.Match()
			for k, v := range opt.Match {
				if got, ok := m[k]; !ok || got != v {
					return
				}
			}
			c := CanonicalMatch(m)
			if c <= string(after) {
				return
			}
			switch {
			case h.Len() < opt.N:
				heap.Push(h, pageItem{c, r})
			case c < (*h)[0].canon:
				(*h)[0] = pageItem{c, r}
				heap.Fix(h, 0)
				more = true
			default:
				more = true
			}
		})
	}
	ix.mu.RUnlock()
	items := make([]pageItem, h.Len())
	for i := len(items) - 1; i >= 0; i-- {
		items[i] = heap.Pop(h).(pageItem)
	}
	for _, it := range items {
		l := Listed{Override: it.r.Override()}
		l.MatchedTotal, l.LastMatchedAt = it.r.Matched()
		page = append(page, l)
	}
	if more && len(items) > 0 {
		next = base64.RawURLEncoding.EncodeToString([]byte(items[len(items)-1].canon))
	}
	return page, next, nil
}

type pageItem struct {
	canon string
	r     *Rule
}

// pageHeap is a max-heap by canon: its top is the page's highest.
type pageHeap []pageItem

func (h pageHeap) Len() int           { return len(h) }
func (h pageHeap) Less(i, j int) bool { return h[i].canon > h[j].canon }
func (h pageHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pageHeap) Push(x any)        { *h = append(*h, x.(pageItem)) }
func (h *pageHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
