// Fair shares on the check path: a fair_share limit's item names its share
// holder (store.Item.Tenant: the `by` descriptor's value, per priority
// class) and that holder's weight, and its status shows them
// (docs/behaviour.md "Fair shares").

package limiter

import (
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// ShareStatus is what a fair_share limit's status shows (JSON
// "fair_share"): the tenant the request counted for ("" for the shared
// "other" tenant: no by descriptor) and its weight; Refused, set when the
// status is written as JSON (ShareRefused), marks a refusal by the
// tenant's share.
type ShareStatus struct {
	Tenant  string `json:"tenant"`
	Weight  uint32 `json:"weight"`
	Refused bool   `json:"refused,omitempty"`
}

// ShareRefused reports whether a fair_share limit refused the request by
// its tenant's share while its bucket alone would have admitted it: by the
// store's rule (store.Spec.DecideShare) a bucket admits a cost exactly
// when the whole tokens it shows the request's class are at least the
// cost, so a refusal of a cost showing that many, not denied and of a
// limit without a block_for (whose refusals may be its penalty box's),
// is the share's.
func (s *LimitStatus) ShareRefused() bool {
	return s.FairShare.Weight != 0 && !s.Allowed && !s.Denied && s.BlockFor == 0 && s.TokenCost > 0 && s.TokensRemaining >= s.TokenCost
}

// share sets item it of fair_share limit lim for req, and its status st:
// its Tenant, the value of the fair_share's by descriptor (a request
// without it is the shared "other" holder, store.OtherHolder, weight 1),
// named with the request's class (Request.Priority, else the policy's
// default) by store.ShareHolder, so that a client's value never names
// another's holder; its Weight, the tenant's in the policy.
func (c *compiled) share(it *store.Item, st *LimitStatus, lim *policy.Limit, req *Request) {
	fs := lim.FairShare
	tenant, ok := req.Descriptors[fs.By]
	if !ok || tenant == "" {
		it.Tenant, it.Weight = store.OtherHolder, 1
		st.FairShare = ShareStatus{Weight: 1}
		return
	}
	it.Weight = fs.Weight(tenant)
	st.FairShare = ShareStatus{Tenant: tenant, Weight: it.Weight}
	class := req.Priority
	if class == "" {
		class = c.p.DefaultPriority
	}
	it.Tenant = store.ShareHolder(class, tenant)
}
