// A limit's fair_share: the refill of a contended token bucket divided
// between tenants, named by a descriptor, by weight (docs/behaviour.md
// "Fair shares").

package policy

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/store"
	"go.yaml.in/yaml/v3"
)

// MaxShareWeight is the largest weight of fair_share.weights.
const MaxShareWeight = 1_000_000

// FairShare (fair_share) divides a token bucket's refill between tenants
// while the bucket is contended (below half its capacity): a tenant may
// take at most its weighted share of the refill, r·w/Σw over the tenants
// active within ActiveWindow, with a burst of τ/2 (at least one request's
// cost). Its store part (ActiveWindow, MaxTenants) is also in the limit's
// store.Limit.FairShare, which the store decides by.
type FairShare struct {
	// By is the descriptor whose value names the request's tenant. It is
	// not one of the limit's key, hash_tag or when descriptors (a tenant
	// with a key of its own has a bucket of its own: there would be
	// nothing to share). A request without it counts for the shared
	// "other" tenant.
	By string
	// Weights are the tenants' weights (1 to MaxShareWeight); a tenant not
	// listed has weight 1.
	Weights map[string]uint32
	// ActiveWindow: a tenant is active if it asked within this window.
	ActiveWindow time.Duration
	// MaxTenants is the most tenants tracked per key (default
	// store.DefaultMaxTenants); the rest share the "other" tenant.
	MaxTenants int
}

// Weight is tenant's weight (1 when not listed).
func (f *FairShare) Weight(tenant string) uint32 {
	if w, ok := f.Weights[tenant]; ok {
		return w
	}
	return 1
}

// fairShareFields are the fields of fair_share.
var fairShareFields = []string{"by", "weights", "active_window", "max_tenants"}

// fairShare validates a limit's fair_share (its kind, key, hash_tag and
// when already parsed): a mapping {by, weights, active_window,
// max_tenants} on a token bucket; by a descriptor name not among the
// limit's key, hash_tag or when descriptors; weights a mapping of tenant
// (not empty: that is the "other" tenant, weight 1) to a whole number
// from 1 to MaxShareWeight; active_window a positive
// duration (required); max_tenants a whole number from 1 to
// store.MaxShareTenants (default store.DefaultMaxTenants).
func (f *limitFields) fairShare(l *Limit) {
	n := f.fields["fair_share"]
	if n == nil {
		return
	}
	if !l.Kind.Shares() {
		f.bad("fair_share", "fair_share applies to token_bucket limits only, not %s (a share is a part of a refill rate)", l.Kind)
		return
	}
	if n.Kind != yaml.MappingNode {
		f.bad("fair_share", "fair_share must be a mapping: {by: DESCRIPTOR_KEY, active_window: DURATION, weights: {TENANT: N}, max_tenants: N}")
		return
	}
	fs := &FairShare{MaxTenants: store.DefaultMaxTenants}
	ok := true
	bad := func(format string, args ...any) {
		f.bad("fair_share", format, args...)
		ok = false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		switch k {
		case "by":
			if v.Kind != yaml.ScalarNode || !validName(v.Value) {
				bad("fair_share.by must be a descriptor key (letters, digits, _ - or .), not %q", v.Value)
				continue
			}
			fs.By = v.Value
		case "weights":
			if v.Kind != yaml.MappingNode {
				bad("fair_share.weights must be a mapping of tenant to weight: {acme: 3}")
				continue
			}
			fs.Weights = make(map[string]uint32, len(v.Content)/2)
			for j := 0; j+1 < len(v.Content); j += 2 {
				t, wn := v.Content[j], v.Content[j+1]
				w, err := strconv.ParseUint(wn.Value, 10, 32)
				switch {
				case t.Kind != yaml.ScalarNode:
					bad("fair_share.weights: a tenant must be a plain value")
				case t.Value == "":
					bad("fair_share.weights: an empty tenant is the shared \"other\" tenant (requests without the by descriptor), whose weight is 1")
				case wn.Kind != yaml.ScalarNode || err != nil || w < 1 || w > MaxShareWeight:
					bad("fair_share.weights.%s must be a whole number from 1 to %d, not %q", t.Value, MaxShareWeight, wn.Value)
				default:
					if _, dup := fs.Weights[t.Value]; dup {
						bad("fair_share.weights: tenant %q given twice", t.Value)
					}
					fs.Weights[t.Value] = uint32(w)
				}
			}
		case "active_window":
			d, err := ParseDuration(v.Value)
			switch {
			case v.Kind != yaml.ScalarNode || err != nil:
				bad("fair_share.active_window must be a duration (10s, 1m), not %q", v.Value)
			case d <= 0:
				bad("fair_share.active_window %v must be positive", d)
			default:
				fs.ActiveWindow = d
			}
		case "max_tenants":
			x, err := strconv.ParseInt(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || err != nil || x < 1 || x > store.MaxShareTenants {
				bad("fair_share.max_tenants must be a whole number from 1 to %d, not %q", store.MaxShareTenants, v.Value)
				continue
			}
			fs.MaxTenants = int(x)
		default:
			bad("unknown field fair_share.%s (want %s)", k, orList(fairShareFields))
		}
	}
	if !ok {
		return
	}
	switch {
	case fs.By == "":
		f.bad("fair_share", "fair_share needs by (the descriptor that names the tenant, such as tenant)")
		return
	case fs.ActiveWindow == 0:
		f.bad("fair_share", "fair_share needs active_window (a tenant is active if it asked within it, such as 10s)")
		return
	case l.usesDescriptor(fs.By):
		f.bad("fair_share", "fair_share.by %q is a descriptor of the limit's key, hash_tag or when: each tenant would have a bucket of its own, with nothing to share (share a key that does not name the tenant)", fs.By)
		return
	}
	l.FairShare = fs
	l.Limit.FairShare = store.FairShare{ActiveWindow: fs.ActiveWindow, MaxTenants: fs.MaxTenants}
}
