// Shadow limits (policy shadow: true, WithShadow): the one rule of how
// they are decided and reported, for Check and CheckMany.

package limiter

import (
	"log/slog"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// decideShadow decides a shadow limit's item (one, a slice of one item so
// that the store writes its decision and key in place) on its own, after the
// enforced limits (refused: they refused): it takes its cost only where it
// would admit, and is peeked when the request was refused, the cost is
// above its capacity, or it is an in-flight cap (a shadow request holds no
// slot). It never refuses, not even by failing: a store error is logged
// and the item reported as admitting, nothing taken.
func (l *Limiter) decideShadow(one []store.Item, name string, refused bool, take func([]store.Item) (store.Result, error)) {
	it := &one[0]
	it.MaxWait = 0
	if refused || it.Spec.HoldsSlots() || it.Cost > it.Spec.Capacity() {
		it.Cost = 0
	}
	if _, err := take(one); err != nil {
		l.logf(slog.LevelWarn, "rate limit: a shadow limit could not be decided", slog.String("limiter", name), slog.String("error", err.Error()))
		it.Cost, it.Decision = 0, sluice.Decision{Allowed: true, Remaining: it.Spec.Capacity()}
	}
}

// shadowVerdict sets a shadow limit's status from its decided item: a
// peeked one (cost 0 taken for a cost that was not) would admit when what
// is left covers its cost; ShadowRefused is the would-be refusal.
func shadowVerdict(st *LimitStatus, it store.Item, peek bool) {
	if !peek && it.Cost == 0 && st.TokenCost > 0 {
		st.Allowed = st.TokenCost <= st.Capacity && it.Decision.Remaining >= st.TokenCost
	}
	st.ShadowRefused = !st.Allowed
}
