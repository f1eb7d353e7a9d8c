// What a Take tells its caller's span (tracing.FromContext): the script
// call that decided it.

package redisstore

import "github.com/sluicehq/sluice/tracing"

// traceBatch tells c's caller's span (when it has one that is sampled)
// the script call that decided it: sluice.store.batch_size (requests
// in the call) and sluice.store.batch_items (their items). It runs before
// the caller is woken, so the span has not ended.
func traceBatch(c *call, requests, items int) {
	if sp := c.span; sp != nil {
		c.span = nil
		if sp.Recording() {
			sp.SetAttributes(tracing.String("sluice.store.script", "take"),
				tracing.Int("sluice.store.batch_size", int64(requests)), tracing.Int("sluice.store.batch_items", int64(items)))
		}
	}
}
