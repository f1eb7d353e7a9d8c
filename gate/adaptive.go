// Ceilings that learn (Config.Adaptive): the gate's refill rate lowered
// multiplicatively on an overload answer and raised additively while none
// comes (AIMD), kept in process or, for a shared gate, in the store.

package gate

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// Adaptive makes a gate's refill rate (its Limit.Rate, the "requests"
// budget) a ceiling that learns, for providers that answer 429, 503 or
// 529 under load without saying their limits (AIMD, as TCP's congestion
// window): Overloaded lowers the rate to max(Min, rate·Decrease), at most
// once per Cooldown (the overloads of one burst count once), and the rate
// climbs back by Increase per second, continuously, up to Max, until the
// next overload. The burst (Limit.Capacity) and the Dimensions are not
// changed. A new gate's ceiling starts at Max.
//
// The ceiling is kept at a resolution of Max/1000 (AdaptiveLevels steps
// between Min and Max, rounded down), as a token bucket of its own whose
// tokens are the steps above Min and whose refill is Increase: so a
// shared gate (Config.Store) keeps it in the store, next to its budget,
// under "gate:{NAME}:adaptive" (and its cooldown under
// "gate:{NAME}:adaptive_cooldown", a bucket of one token per Cooldown),
// and one worker's overload lowers it for the whole fleet, which then
// climbs back together. A change of the ceiling converts the budget's
// state by the SetLimit rule (store.Item.Base, store.SpecConverter; in
// process bucket.Bucket.SetLimit): the tokens it holds are kept, no burst
// is created, debt is kept.
type Adaptive struct {
	// Min is the lowest refill rate, tokens per second; it must be
	// positive and below Max.
	Min float64
	// Max is the highest refill rate; 0 means Limit.Rate.
	Max float64
	// Decrease is the factor an overload multiplies the rate by, in
	// (0, 1); 0 means 0.5.
	Decrease float64
	// Increase is how much the rate climbs per second without an
	// overload; 0 means 1 % of Max.
	Increase float64
	// Cooldown is the shortest time between two decreases; 0 means one
	// second.
	Cooldown time.Duration
}

// AdaptiveLevels is the number of steps of an adaptive ceiling between Min
// and Max: a step is Max/AdaptiveLevels.
const AdaptiveLevels = 1000

// adaptive is a gate's learning ceiling.
type adaptive struct {
	cfg    Adaptive // defaults applied
	q      float64  // one step
	levels int64    // steps between Min and Max
	burst  int64    // the budget's capacity

	// in process
	deficit *bucket.Bucket // tokens: steps above Min
	cool    *bucket.Bucket
	applied atomic.Int64 // the level the gate's bucket refills at

	// shared
	dspec, cspec *store.Spec
	dkey, ckey   string
	base         *store.Spec // the budget's usual spec
	level        atomic.Int64
	mu           sync.Mutex
	specs        map[int64]*store.Spec
}

// newAdaptive checks cfg.Adaptive and makes the ceiling; nil without one.
func newAdaptive(cfg Config, base string) (*adaptive, error) {
	if cfg.Adaptive == nil {
		return nil, nil
	}
	a := *cfg.Adaptive
	if a.Max == 0 {
		a.Max = cfg.Limit.Rate
	}
	if a.Decrease == 0 {
		a.Decrease = 0.5
	}
	if a.Increase == 0 {
		a.Increase = a.Max / 100
	}
	if a.Cooldown == 0 {
		a.Cooldown = time.Second
	}
	bad := func(format string, args ...any) error {
		return sluice.Errorf(sluice.ErrInvalidLimit, "gate config: Adaptive."+format, args...)
	}
	switch {
	case !(a.Min > 0) || math.IsInf(a.Max, 0) || !(a.Min < a.Max):
		return nil, bad("Min %v must be positive and below Max %v", a.Min, a.Max)
	case !(a.Decrease > 0 && a.Decrease < 1):
		return nil, bad("Decrease %v must be in (0, 1)", a.Decrease)
	case !(a.Increase > 0) || math.IsInf(a.Increase, 0):
		return nil, bad("Increase %v must be positive", a.Increase)
	case a.Cooldown < 0:
		return nil, bad("Cooldown %v must not be negative", a.Cooldown)
	}
	ad := &adaptive{cfg: a, q: a.Max / AdaptiveLevels, burst: cfg.Limit.Capacity}
	ad.levels = int64((a.Max - a.Min) / ad.q)
	if ad.levels < 1 {
		return nil, bad("Min %v must be at least Max/%d below Max %v", a.Min, AdaptiveLevels, a.Max)
	}
	dl := bucket.Limit{Capacity: ad.levels, Rate: a.Increase / ad.q}
	cl := bucket.Limit{Capacity: 1, Rate: 1 / max(a.Cooldown.Seconds(), 1e-9)}
	ad.level.Store(ad.levels)
	ad.applied.Store(ad.levels)
	if cfg.Store != nil {
		var err error
		if ad.dspec, err = store.NewBucketSpec(dl); err != nil {
			return nil, bad("Increase: %v", err)
		}
		if ad.cspec, err = store.NewBucketSpec(cl); err != nil {
			return nil, bad("Cooldown: %v", err)
		}
		if sc, ok := cfg.Store.(store.SpecConverter); !ok || !sc.ConvertsSpecs() {
			return nil, bad("needs a Store that converts specs (store.SpecConverter), %T does not", cfg.Store)
		}
		ad.dkey, ad.ckey = base+"adaptive", base+"adaptive_cooldown"
		ad.specs = map[int64]*store.Spec{}
		return ad, nil
	}
	var opts []bucket.Option
	if cfg.Clock != nil {
		opts = append(opts, bucket.WithClock(cfg.Clock))
	}
	var err error
	if ad.deficit, err = bucket.New(dl, opts...); err != nil {
		return nil, bad("Increase: %v", err)
	}
	if ad.cool, err = bucket.New(cl, opts...); err != nil {
		return nil, bad("Cooldown: %v", err)
	}
	if cfg.Limit.Rate != a.Max {
		// the gate's bucket refills at the ceiling's start, Max
		if err := (bucket.Limit{Capacity: ad.burst, Rate: a.Max}).Validate(); err != nil {
			return nil, bad("Max: %v", err)
		}
		ad.applied.Store(-1)
	}
	return ad, nil
}

// withAdaptive gives g its ceiling (Config.Adaptive), in the store for a
// shared gate.
func (g *Gate) withAdaptive(cfg Config) (err error) {
	if g.ad, err = newAdaptive(cfg, sharedBase(g.name)); err != nil {
		return err
	}
	if g.ad != nil && g.sh != nil {
		g.sh.ad, g.ad.base = g.ad, g.sh.specs[0]
	}
	return nil
}

// rate is the refill rate of a level.
func (ad *adaptive) rate(level int64) float64 {
	return ad.cfg.Min + float64(min(max(level, 0), ad.levels))*ad.q
}

// lowered is the level an overload at level leads to.
func (ad *adaptive) lowered(level int64) int64 {
	r := max(ad.cfg.Min, ad.rate(level)*ad.cfg.Decrease)
	return min(max(int64((r-ad.cfg.Min)/ad.q), 0), level)
}

// sync makes an in-process gate's bucket refill at the ceiling's current
// level (bucket.Bucket.SetLimit: tokens kept, no burst), when it moved;
// on nil (no Adaptive) it does nothing.
func (ad *adaptive) sync(g *Gate) {
	if ad == nil {
		return
	}
	lvl := int64(ad.deficit.Tokens())
	if ad.applied.Load() == lvl {
		return
	}
	if err := g.b.SetLimit(bucket.Limit{Capacity: ad.burst, Rate: ad.rate(lvl)}); err == nil {
		ad.applied.Store(lvl)
	}
}

// Refill returns the gate's refill rate now, tokens per second: its
// Limit.Rate, or with Config.Adaptive the ceiling learnt so far (a shared
// gate's as this process last read it from the store, at its last
// admission or overload).
func (g *Gate) Refill() float64 {
	ad := g.ad
	switch {
	case ad == nil:
		return g.limit.Rate
	case ad.deficit != nil:
		return ad.rate(int64(ad.deficit.Tokens()))
	}
	return ad.rate(ad.level.Load())
}

// Overloaded reports an overload answer of the other side (a 429, 503 or
// 529 without a usable retry hint, or a classifier's verdict: httplimit's
// transport calls it) to a gate with Config.Adaptive: the refill rate is
// lowered to max(Min, rate·Decrease) unless another overload did so less
// than Cooldown ago (of any worker, for a shared gate). It reports whether
// it lowered the rate; without Adaptive it does nothing and reports
// false. A shared gate's store error is logged and reported as false.
func (g *Gate) Overloaded() bool {
	ad := g.ad
	if ad == nil {
		return false
	}
	if ad.deficit != nil {
		if d, _, _ := ad.cool.Take(1); !d.Allowed {
			return false
		}
		from := int64(ad.deficit.Tokens())
		to := ad.lowered(from)
		lowerLocal(ad.deficit, to)
		ad.sync(g)
		g.logAdaptive(ad.rate(from), ad.rate(to))
		return true
	}
	ctx := context.Background()
	items := []store.Item{{Key: ad.ckey, Spec: ad.cspec, Cost: 1}, {Key: ad.dkey, Spec: ad.dspec}}
	res, err := g.sh.st.Take(ctx, items)
	if err != nil {
		g.logWarn("gate: reading the adaptive ceiling failed", err)
		return false
	}
	from := items[1].Decision.Remaining
	ad.level.Store(from)
	if !res.Allowed {
		return false
	}
	to := ad.lowered(from)
	if to < from {
		if err := g.sh.st.Adjust(ctx, []store.Adjustment{{Key: ad.dkey, Spec: ad.dspec, Lower: true, Delta: to}}); err != nil {
			g.logWarn("gate: lowering the adaptive ceiling failed", err)
			return false
		}
		ad.level.Store(to)
	}
	g.logAdaptive(ad.rate(from), ad.rate(to))
	return true
}

// logAdaptive logs a decrease of the ceiling.
func (g *Gate) logAdaptive(from, to float64) {
	if g.cfg.Logger == nil {
		return
	}
	g.mu.Lock()
	g.logLocked(slog.LevelWarn, "rate limit: an overload answer lowers the gate's refill",
		slog.Float64("refill_per_second", to), slog.Float64("previous_refill_per_second", from))
	g.mu.Unlock()
}

// specAt is a shared gate's budget spec at level (made once per level).
func (ad *adaptive) specAt(level int64) *store.Spec {
	if level >= ad.levels && ad.rate(level) == ad.base.Bucket.Limit().Rate {
		return ad.base
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	sp := ad.specs[level]
	if sp == nil {
		var err error
		if sp, err = store.NewBucketSpec(bucket.Limit{Capacity: ad.burst, Rate: ad.rate(level)}); err != nil {
			return ad.base // (a rate between Min and Max of a valid limit compiles)
		}
		sp.FairShare = ad.base.FairShare // (the gate's fair share, if any, at every level)
		ad.specs[level] = sp
	}
	return sp
}

// items gives a shared gate's Take the budget at the ceiling's level (its
// state converted from the spec that wrote it) and a peek at the ceiling,
// whose answer (note) is the level of the next Take.
func (ad *adaptive) items(items []store.Item) []store.Item {
	items[0].Spec, items[0].Base = ad.specAt(ad.level.Load()), ad.base
	return append(items, store.Item{Key: ad.dkey, Spec: ad.dspec, MaxWait: items[0].MaxWait})
}

// note reads the ceiling's level from a Take's answer.
func (ad *adaptive) note(items []store.Item) {
	if it := &items[len(items)-1]; it.Key == ad.dkey {
		ad.level.Store(it.Decision.Remaining)
	}
}

// rebase makes the adjustments of a shared gate's budget (index 0: the
// requests key) name the spec it is decided under now and its usual one.
func (ad *adaptive) rebase(sh *shared, adj []store.Adjustment) {
	if ad == nil {
		return
	}
	for i := range adj {
		if adj[i].Key == sh.keys[0] {
			adj[i].Spec, adj[i].Base = ad.specAt(ad.level.Load()), ad.base
		}
	}
}

// String describes the ceiling's parameters (for errors and logs).
func (a Adaptive) String() string {
	return fmt.Sprintf("adaptive refill %v..%v per second (x%v per overload, +%v per second, cooldown %v)", a.Min, a.Max, a.Decrease, a.Increase, a.Cooldown)
}
