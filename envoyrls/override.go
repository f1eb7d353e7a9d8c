// A descriptor's own limit (RateLimitDescriptor.limit): Envoy's per-request
// override of the configured limit, as the reference service applies it.

package envoyrls

import (
	"strings"
	"sync"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/store"
)

// MaxOverrideLimits bounds the distinct limits (requests_per_unit, unit,
// unit_multiplier) that descriptors' own limits name across a Service's
// life: each is compiled once and kept (stores cache by spec), so a call
// naming one more is refused (InvalidArgument).
const MaxOverrideLimits = 4096

// overrideKey is a descriptor limit's identity.
type overrideKey struct {
	rpu, mult uint32
	unit      rls.RateLimitResponse_RateLimit_Unit
}

// overrides holds the descriptor limits compiled so far.
type overrides struct {
	mu sync.Mutex
	m  map[overrideKey]*Limit
}

// limit returns the limit a descriptor's own limit o stands for, as the
// reference service makes it (config GetLimit with descriptor.GetLimit()):
// requests_per_unit per unit, unnamed, neither shadow nor unlimited,
// whatever the configuration says of the descriptor — here a token bucket
// of capacity requests_per_unit refilled at requests_per_unit per unit
// (times unit_multiplier, which the reference service ignores; absent or 0
// is 1). A requests_per_unit of 0 refuses every request (nil spec). The
// unit must be one Envoy names (not UNKNOWN).
func (ov *overrides) limit(i int, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*Limit, error) {
	k := overrideKey{rpu: o.GetRequestsPerUnit(), mult: max(o.GetUnitMultiplier().GetValue(), 1), unit: rls.RateLimitResponse_RateLimit_Unit(o.GetUnit())}
	ov.mu.Lock()
	defer ov.mu.Unlock()
	if l := ov.m[k]; l != nil {
		return l, nil
	}
	secs := 0.0
	for _, u := range units {
		if u.unit == k.unit {
			secs = u.secs
		}
	}
	if secs == 0 {
		return nil, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: its limit's unit %v is not second, minute, hour, day, week, month or year", i, o.GetUnit()))
	}
	if len(ov.m) >= MaxOverrideLimits {
		return nil, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: more than %d distinct descriptor limits", i, MaxOverrideLimits))
	}
	l := &Limit{Unit: k.unit, RequestsPerUnit: k.rpu}
	if k.rpu > 0 {
		sp, err := store.NewBucketSpec(bucket.Limit{Capacity: int64(k.rpu), Rate: float64(k.rpu) / (secs * float64(k.mult))})
		if err != nil {
			return nil, grpcError(answer.Errorf(answer.BadRequest, "descriptor %d: its limit: %v", i, err))
		}
		l.spec = sp
	}
	if ov.m == nil {
		ov.m = map[overrideKey]*Limit{}
	}
	ov.m[k] = l
	return l, nil
}

// overrideLabel is the metrics name of a descriptor's own limit: the
// reference service's stats key (domain, then each entry's key, dotted)
// without the entries' values, which are a request's and would make the
// label unbounded (the reference service writes key_value).
func overrideLabel(domain string, entries [][2]string) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e[0])
	}
	return b.String()
}
