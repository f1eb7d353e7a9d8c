// The types of a check: its request, result and per-limit status, and the
// errors a check returns for a bad request.

package limiter

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/store"
)

// Request is one admission check.
type Request struct {
	// Descriptors name the request: tenant, user, api_key, route, ... They
	// select the limits that apply and fill their key templates.
	Descriptors map[string]string
	// Cost is the tokens to take; 0 means the policy's cost for these
	// descriptors (its first matching cost rule, else 1). Negative costs
	// are refused with sluice.ErrInvalidCost.
	Cost int64
	// Costs overrides Cost for the limits it names (by limit name): "1
	// request and 1,200 tokens" against a requests-per-minute and a
	// tokens-per-minute limit is Cost 1 (or the policy's) and Costs
	// {"tpm": 1200}. Every name must be a limit that applies to the
	// request and is not an in-flight cap (which takes one slot whatever
	// the cost); else the check fails with a *UnknownLimitError, or
	// sluice.ErrInvalidCost for a negative cost or an in-flight cap, and
	// takes nothing. A cost above its limit's capacity is a *CostError
	// naming the limit, as for Cost.
	Costs map[string]int64
	// Peek reports the limits' state and takes nothing. A peek is not a
	// decision: it is not counted in sluice_decisions_total and a peek that
	// finds a limit refusing is not logged.
	Peek bool
	// MaxWait lets Check book the request in its limits' line, when it
	// cannot be admitted now, if its turn comes within this long (and ctx's
	// deadline): FIFO by arrival at the store (store.Item.MaxWait). Check
	// then sleeps until the turn (unless Reserve); 0 (or less, as for
	// bucket.Bucket.Reserve) decides at once. Only token buckets book: the
	// other kinds must admit now.
	MaxWait time.Duration
	// Reserve, with MaxWait, books without sleeping: an admitted Result's
	// Wait says when the request may act. It implies Receipt: a caller that
	// gives up returns the booking with Settle(res.Receipt, 0) before the
	// wait is over (and Release(res.Slots) frees its in-flight slots).
	Reserve bool
	// Retry marks a retried request, counted apart from original ones.
	Retry bool
	// Receipt asks for Result.Receipt (what was taken, for Settle); it
	// costs an allocation, so it is off unless asked for.
	Receipt bool
	// RefuseUnmatched makes a check that no limit applies to fail with a
	// *NoLimitError (matching ErrNoLimitApplies), taking nothing, unless
	// the policy says allow_unmatched: true; without it such a check is
	// admitted with no limits (as forward-auth and the Envoy mode do).
	RefuseUnmatched bool
	// Spec, when set, is a per-request limit (Envoy's
	// RateLimitDescriptor.limit): it decides every limit that applies to
	// the request, in-flight caps aside, in place of the limit's own
	// parameters and of its overrides (which are not consulted), the
	// limit's shadow mode kept; statuses show its capacity and rate, and a
	// cost above its capacity is a *CostError. The key is the limit's under
	// the spec's state tag: the limit's own when the tags agree (a store
	// that converts specs converts the key's state, store.Item.Base), else
	// one of its own. Specs are compared by pointer and stores may cache
	// by it: compile each distinct one once and reuse it. It must not hold
	// slots.
	Spec *store.Spec
	// Priority names the request's priority class (policy priorities):
	// its items are admitted or booked only within each limit cut by the
	// class's reserve, and booked at most its max_queue_ms deep
	// (store.Item.Reserve; docs/behaviour.md "Priority classes"). Empty
	// is the policy's default_priority, or no class (the whole limit)
	// when it has none. A name the policy does not list fails the check
	// with a *policy.UnknownPriorityError (matching
	// policy.ErrUnknownPriority), taking nothing.
	Priority string
}

// LimitStatus is one applicable limit's part of a decision.
type LimitStatus struct {
	Name            string  `json:"name"`
	Key             string  `json:"key"`
	Algorithm       string  `json:"algorithm"`
	Capacity        int64   `json:"capacity"`          // bucket capacity, window limit, or max in flight
	RefillPerSecond float64 `json:"refill_per_second"` // 0 for windows and concurrency limits
	// AdaptiveRefill is, for an adaptive limit (policy.Limit.Adaptive),
	// the refill its key was decided under: the ceiling learnt so far.
	AdaptiveRefill  float64 `json:"adaptive_refill_per_second,omitempty"`
	TokensRemaining int64   `json:"tokens_remaining"`
	TokenCost       int64   `json:"token_cost"`
	Allowed         bool    `json:"allowed"`
	// Shadow marks a limit in shadow mode (policy shadow: true, or
	// WithShadow): evaluated and counted, never refusing; ShadowRefused is
	// its would-be refusal (then Allowed is false, and it took nothing,
	// while the request may be admitted).
	Shadow        bool `json:"shadow,omitempty"`
	ShadowRefused bool `json:"shadow_refused,omitempty"`
	// Denied marks a refusal by an override with deny: true (Allowed is
	// false whatever the limit's state; retrying is useless).
	Denied bool `json:"denied,omitempty"`
	// NearLimit marks a limit whose use has reached its lowest alert
	// below 1 (policy alerts; set by the service, which fires them).
	NearLimit bool `json:"near_limit,omitempty"`
	// Priority is the request's priority class (Result.Priority), when it
	// has one: its TokensRemaining is what the class may still take.
	Priority   string        `json:"priority,omitempty"`
	RetryAfter time.Duration `json:"-"`
	// BlockFor is the limit's penalty box in force (block_for; 0: none,
	// and always 0 in shadow mode, which blocks no key): JSON "block_for"
	// ("10m0s"), and "blocked": true on a refusal it made (Blocked).
	BlockFor   time.Duration `json:"-"`
	ResetAfter time.Duration `json:"-"`
	// Period is a quota's calendar period ("day", "week", "month",
	// "year"); empty for other kinds.
	Period string `json:"period,omitempty"`
	// Window is the span a limit's capacity covers where it is not the
	// refill time: a window limit's length, an in-flight cap's lease_ttl
	// (the longest a slot stays taken), a quota's nominal period
	// (policy.Limit.Span); 0 for token buckets.
	Window time.Duration `json:"-"`
	// Override is the override that decided this limit for the request
	// (nil: the policy's limit did); JSON shows it as "override":
	// {"match": ...}. Capacity, RefillPerSecond, Window and Period are the
	// limit in force under it.
	Override *overrides.Rule `json:"-"`
	// FairShare is, for a limit with a fair_share, the tenant the request
	// counted for and its weight (limiter/fairshare.go); zero otherwise.
	FairShare ShareStatus `json:"fair_share,omitzero"`
}

// overrideJSON is how a status shows its override.
type overrideJSON struct {
	Match json.RawMessage `json:"match"`
}

// MarshalJSON writes the status with retry_after_ms and reset_after_ms
// (rounded up to the millisecond).
// An overridden limit's status adds "override": {"match": {...}} (its
// match as overrides.CanonicalMatch writes it).
func (s LimitStatus) MarshalJSON() ([]byte, error) {
	type plain LimitStatus
	var o *overrideJSON
	if s.Override != nil {
		o = &overrideJSON{Match: json.RawMessage(s.Override.CanonicalMatch())}
	}
	var bf string
	if s.BlockFor > 0 {
		bf = s.BlockFor.String()
	}
	s.FairShare.Refused = s.ShareRefused()
	return json.Marshal(struct {
		plain
		RetryAfterMS int64         `json:"retry_after_ms"`
		ResetAfterMS int64         `json:"reset_after_ms"`
		Override     *overrideJSON `json:"override,omitempty"`
		BlockFor     string        `json:"block_for,omitempty"`
		Blocked      bool          `json:"blocked,omitempty"`
	}{plain(s), CeilMS(s.RetryAfter), CeilMS(s.ResetAfter), o, bf, s.Blocked()})
}

// Blocked reports whether the key is in its penalty box after this
// decision: the limit has a BlockFor and refused the request (by the
// store's rule, store.Spec.Penalize, every such refusal of a cost starts a
// block or falls in one, and RetryAfter counts down to its end). A deny
// and a shadow limit block nothing.
func (s *LimitStatus) Blocked() bool {
	return s.BlockFor > 0 && !s.Allowed && !s.Denied && !s.Shadow
}

// CeilMS rounds d up to whole milliseconds.
func CeilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Result is the outcome of Check.
type Result struct {
	// Allowed is true when every applicable limit admitted the request.
	Allowed bool
	// RetryAfter is, when refused, the wait until every limit could admit
	// (the largest of their waits).
	RetryAfter time.Duration
	// Slots holds in-flight slots taken by max_in_flight limits; release
	// it with Limiter.Release (it also expires after the limit's lease_ttl).
	Slots store.Slots
	// Limits is the status of each applicable limit, in policy order.
	Limits []LimitStatus
	// Cost is the cost the request was charged (or would have been).
	Cost int64
	// Wait is, for an admitted Request.Reserve, how long after the
	// decision the request may act (its booked turn); 0 otherwise.
	Wait time.Duration
	// Receipt records what an admitted request took, for Settle (when the
	// request asked for it).
	Receipt Receipt
	// Priority is the request's priority class (Request.Priority, or the
	// policy's default_priority); empty when it has none.
	Priority string

	scratch *scratch // CheckInto's working space
	class   int      // 1 + the index of Priority in the policy's classes, when counted by it (classMetrics)
}

// ErrUnknownLimit is matched by an *UnknownLimitError.
var ErrUnknownLimit = errors.New("unknown limit")

// UnknownLimitError reports a per-limit cost (Request.Costs, or an actual
// cost given to SettleCosts) naming a limit that does not apply: not in the
// policy, not applicable to the request's descriptors, or not in the
// receipt. Nothing was taken or settled.
type UnknownLimitError struct {
	Name string
	// Applicable are the names that would have been accepted, in policy
	// order.
	Applicable []string
}

// Error reads `unknown limit "x": the applicable limits are "a", "b"`.
func (e *UnknownLimitError) Error() string {
	msg := fmt.Sprintf("%v %q", ErrUnknownLimit, e.Name)
	if len(e.Applicable) == 0 {
		return msg + ": no limit applies"
	}
	q := make([]string, len(e.Applicable))
	for i, n := range e.Applicable {
		q[i] = strconv.Quote(n)
	}
	return msg + ": the applicable limits are " + strings.Join(q, ", ")
}

// Unwrap returns ErrUnknownLimit.
func (e *UnknownLimitError) Unwrap() error { return ErrUnknownLimit }

// CostError is returned when a cost exceeds the capacity of an applicable
// limit: such a request can never be admitted (all or nothing), so
// retrying is useless. It matches sluice.ErrCostExceedsCapacity.
type CostError struct {
	Limit    string
	Cost     int64
	Capacity int64
}

func (e *CostError) Error() string {
	return fmt.Sprintf("sluice: cost %d exceeds capacity %d of limit %q", e.Cost, e.Capacity, e.Limit)
}

// Unwrap makes errors.Is(err, sluice.ErrCostExceedsCapacity) true.
func (e *CostError) Unwrap() error { return sluice.ErrCostExceedsCapacity }
