// Internals of the overrides store that its external tests use.

package redisstore

// WithOverridesPage returns x with pages of n records (as PageSize, but
// below its floor of 1 for tests of the paging itself).
func WithOverridesPage(x *Overrides, n int) *Overrides {
	y := x.s.Overrides(x.opt)
	y.opt.PageSize = n
	return y
}
