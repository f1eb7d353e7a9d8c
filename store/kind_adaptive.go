// The kind table's answer for adaptive ceilings (policy's adaptive, the limiter's Feedback).

package store

// Adaptable reports whether a limit of kind k can follow an adaptive
// ceiling on its refill (a policy limit's adaptive, lowered by feedback
// and climbing back): the kinds that take a ceiling (Pausable), token
// buckets. A window's, quota's or in-flight cap's count has no refill to
// lower.
func (k Kind) Adaptable() bool { return k.Pausable() }
