// Priority classes on the check path: a request's class resolved by the
// policy and applied to its items (store.Item.Reserve, its max_queue_ms
// cutting MaxWait).

package limiter

import (
	"fmt"

	"github.com/sluicehq/sluice/store"
)

// classify resolves req's class (Request.Priority, else the policy's
// default_priority), records it in res, and sets each item's reserve; a
// class that bounds its queue cuts req.MaxWait to its max_queue_ms (0:
// the request never waits). An unknown class is an error, nothing taken.
func (c *compiled) classify(req *Request, items []store.Item, res *Result) error {
	cls, err := c.p.Priority(req.Priority)
	if err != nil {
		return fmt.Errorf("limiter: %w", err)
	}
	res.Priority = cls.Name
	req.MaxWait = cls.MaxWait(req.MaxWait)
	if cls.Reserve != 0 {
		for j := range items {
			items[j].Reserve = cls.Reserve
		}
	}
	for i := range res.Limits {
		res.Limits[i].Priority = cls.Name
	}
	return nil
}
