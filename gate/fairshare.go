// Fair shares of a shared gate between tenants: Config.FairShare and the
// Tenant call option (docs/behaviour.md section 8).

package gate

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// FairShare divides a shared gate's budgets between tenants while they
// are contended, by the rule of a policy's fair_share (docs/behaviour.md
// section 8): while a budget's bucket holds fewer than half its capacity,
// a tenant (the Tenant call option) takes at most its weighted share of
// the refill, r·w/Σw over the tenants active within ActiveWindow, with a
// burst of τ/2 (at least one call's cost); an uncontended budget admits
// any call, as without shares. Every budget of the gate (Limit and each
// Dimension) is divided so, the tenant set kept in the store beside each
// budget's bucket, so that every gate of the name agrees. With priority
// classes the share holder is the class and the tenant together, so
// shares apply within a class. A call naming no tenant counts for the
// shared "other" tenant (weight 1).
type FairShare struct {
	// ActiveWindow > 0 turns fair shares on: a tenant is active if it
	// called within this window. Zero: no fair share.
	ActiveWindow time.Duration
	// Weights are the tenants' weights (1 to policy.MaxShareWeight); a
	// tenant not listed has weight 1.
	Weights map[string]uint32
	// MaxTenants is the most tenants tracked per budget (0:
	// store.DefaultMaxTenants; at most store.MaxShareTenants); the rest
	// share the "other" tenant.
	MaxTenants int
}

// On reports whether f is set (ActiveWindow > 0).
func (f *FairShare) On() bool { return f.ActiveWindow > 0 }

// Tenant makes a call (Do, Reserve) one of tenant name on a gate with
// Config.FairShare: its budgets' shares are name's (weight
// Config.FairShare.Weights[name], default 1). A gate without FairShare
// ignores it; "" is the shared "other" tenant.
func Tenant(name string) Option { return func(o *callOpts) { o.tenant = name } }

// tenantKey carries a call's tenant in its context, from Do or Reserve to
// the shared admission.
type tenantKey struct{}

// checkFairShare validates Config.FairShare: only with a Store, a
// positive ActiveWindow when any field is set, weights of named tenants
// within 1..policy.MaxShareWeight, MaxTenants within
// 0..store.MaxShareTenants.
func checkFairShare(cfg Config) error {
	f := cfg.FairShare
	if f.ActiveWindow == 0 && f.Weights == nil && f.MaxTenants == 0 {
		return nil
	}
	bad := func(format string, args ...any) error {
		return sluice.Errorf(sluice.ErrInvalidLimit, "gate config: FairShare: "+format, args...)
	}
	switch {
	case cfg.Store == nil:
		return bad("fair shares need a shared gate (Store): the tenants are counted in the store")
	case f.ActiveWindow <= 0:
		return bad("ActiveWindow %v must be positive", f.ActiveWindow)
	case f.MaxTenants < 0 || f.MaxTenants > store.MaxShareTenants:
		return bad("MaxTenants %d must be within 0 (the default, %d) and %d", f.MaxTenants, store.DefaultMaxTenants, store.MaxShareTenants)
	}
	for name, w := range f.Weights {
		if name == "" || w < 1 || w > policy.MaxShareWeight {
			return bad("Weights[%q] = %d: a tenant needs a name and a weight within 1..%d", name, w, policy.MaxShareWeight)
		}
	}
	return nil
}

// storeShare is FairShare's store part, for every budget's spec (nil:
// none).
func (f *FairShare) storeShare() *store.FairShare {
	if !f.On() {
		return nil
	}
	n := f.MaxTenants
	if n == 0 {
		n = store.DefaultMaxTenants
	}
	return &store.FairShare{ActiveWindow: f.ActiveWindow, MaxTenants: n}
}

// shareItems names the share holder of a call's fair-share items: its
// tenant (ctx, from Tenant) with its class, as the limiter names it
// (store.ShareHolder: no tenant's value names another class's or
// tenant's holder), and the tenant's weight; a call with no tenant is the
// "other" holder, weight 1.
func (g *Gate) shareItems(ctx context.Context, cls policy.Priority, items []store.Item) {
	if !g.cfg.FairShare.On() {
		return
	}
	tenant, _ := ctx.Value(tenantKey{}).(string)
	holder, w := store.OtherHolder, uint32(1)
	if tenant != "" {
		if x, ok := g.cfg.FairShare.Weights[tenant]; ok {
			w = x
		}
		holder = store.ShareHolder(cls.Name, tenant)
	}
	for i := range items {
		if items[i].Spec.FairShare != nil {
			items[i].Tenant, items[i].Weight = holder, w
		}
	}
}

// withTenant returns ctx carrying tenant (ctx itself for "" or a gate
// without FairShare).
func (g *Gate) withTenant(ctx context.Context, tenant string) context.Context {
	if tenant == "" || !g.cfg.FairShare.On() {
		return ctx
	}
	return context.WithValue(ctx, tenantKey{}, tenant)
}
