// quota_mode: descriptors that fail a call only when all of them are over.

package envoyrls

import (
	"context"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/store"
)

// decideQuota decides the call's quota_mode descriptors as the reference
// service does since envoyproxy/ratelimit#1059: each one is taken on its
// own (a quota descriptor over its limit reports OVER_LIMIT in its
// status), and the call is over the limit only when every quota
// descriptor of it is (or another descriptor is). They are decided after
// the call's other descriptors, and only peeked when those were refused,
// so a refused call takes nothing from them; when every quota descriptor
// is over, the call is refused after its other descriptors were taken
// (the one case where a refused call consumes, as every refused call does
// in the reference service).
func (c *rlsCall) decideQuota(ctx context.Context, st store.Store) error {
	if c.quotas == 0 {
		return nil
	}
	if c.overall != rls.RateLimitResponse_OK {
		if len(c.quota) == 0 {
			return nil
		}
		for j := range c.quota {
			c.quota[j].Cost = 0
		}
		if _, err := st.Take(ctx, c.quota); err != nil {
			return storeError(err)
		}
		return nil
	}
	for j := range c.quota {
		r, err := st.Take(ctx, c.quota[j:j+1])
		if err != nil {
			return storeError(err)
		}
		if !r.Allowed {
			c.quotaOver++
		}
	}
	if c.quotaOver == c.quotas {
		c.overall = rls.RateLimitResponse_OVER_LIMIT
	}
	return nil
}

// storeError is a store's error as the call's gRPC error.
func storeError(err error) error {
	p := answer.Classify(err)
	p.Msg = "store: " + p.Msg
	return grpcError(p)
}
