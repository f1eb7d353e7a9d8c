// The options of one call (Do, Reserve): RetryAttempt, Charge, Priority
// (priority.go) and Tenant (fairshare.go).

package gate

// Option is an option of one call (Do, Reserve).
type Option func(*callOpts)

type callOpts struct {
	charges  map[string]int64
	attempt  int
	priority string // Priority's class ("": none named)
	tenant   string // Tenant's tenant ("": none named; fairshare.go)
}

// RetryAttempt labels a Reserve as attempt n of a call (2 for its first
// retry), counted and reported as a retry (see BeforeRetry); n <= 1 is the
// original call.
func RetryAttempt(n int) Option { return func(o *callOpts) { o.attempt = n } }

// Charge charges the call cost in the gate's dimension name (a
// Config.Dimensions name): g.Do(ctx, 1, fn, gate.Charge("tokens", 1200)).
// A dimension without a Charge is charged 0. An unknown name, a negative
// cost or one above the dimension's capacity refuses the call
// (sluice.ErrInvalidCost, sluice.ErrCostExceedsCapacity), consuming
// nothing.
func Charge(name string, cost int64) Option {
	return func(o *callOpts) {
		if o.charges == nil {
			o.charges = map[string]int64{}
		}
		o.charges[name] = cost
	}
}
