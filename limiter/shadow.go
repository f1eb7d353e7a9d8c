// Shadow limits (policy shadow: true, WithShadow, Envoy's shadow_mode): the
// one rule of how they are decided and reported, for Check, CheckMany and
// the Envoy service.

package limiter

import (
	"log/slog"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// DecideShadow decides a shadow limit's item (one, a slice of one item so
// that the store writes its decision and key in place) on its own through
// take (a store's Take), after the enforced limits (refused: they refused
// the request): it takes its cost only where it would admit, and is peeked
// (its Cost set to 0) when the request was refused, the cost is above its
// capacity (its class's: store.Spec.ClassCapacity), or it is an in-flight cap (a shadow request holds no slot). It
// never refuses, not even by failing: on the store's error, returned for
// the caller to log, the item is reported as admitting, nothing taken.
// ShadowRefused then tells its would-be refusal.
func DecideShadow(one []store.Item, refused bool, take func([]store.Item) (store.Result, error)) error {
	it := &one[0]
	it.MaxWait = 0
	if refused || it.Spec.HoldsSlots() || it.Cost > it.Spec.ClassCapacity(it.Reserve) {
		it.Cost = 0
	}
	_, err := take(one)
	if err != nil {
		it.Cost, it.Decision = 0, sluice.Decision{Allowed: true, Remaining: it.Spec.Capacity()}
	}
	return err
}

// ShadowRefused is the would-be refusal of a shadow limit's item decided
// by DecideShadow, for a request of cost (0 for a peek): its decision,
// or, when it was peeked for a cost, whether what is left covers the cost
// (a cost above its capacity never is).
func ShadowRefused(it store.Item, cost int64) bool {
	if it.Cost == 0 && cost > 0 {
		return cost > it.Spec.ClassCapacity(it.Reserve) || it.Decision.Remaining < cost
	}
	return !it.Decision.Allowed
}

// decideShadow is DecideShadow, logging a store's error under the limit's
// name.
func (l *Limiter) decideShadow(one []store.Item, name string, refused bool, take func([]store.Item) (store.Result, error)) {
	if err := DecideShadow(one, refused, take); err != nil {
		l.logf(slog.LevelWarn, "rate limit: a shadow limit could not be decided", slog.String("limiter", name), slog.String("error", err.Error()))
	}
}

// shadowVerdict sets a shadow limit's status from its decided item
// (ShadowRefused; a peek's cost is 0).
func shadowVerdict(st *LimitStatus, it store.Item, peek bool) {
	cost := st.TokenCost
	if peek {
		cost = 0
	}
	st.ShadowRefused = ShadowRefused(it, cost)
	st.Allowed = !st.ShadowRefused
}
