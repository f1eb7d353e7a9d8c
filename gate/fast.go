// The in-process fast path (a call admitted at once, taking no lock) and
// the all-or-nothing takes across the dimensions' buckets.

package gate

import (
	"runtime"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// tryNowDims is tryNow for a call charging dimensions: every bucket must
// have its cost now (all or nothing: each taken is returned when one has
// not), then a slot.
func (g *Gate) tryNowDims(cost int64, attempt int, ch []int64, cls class) (*bucket.Reservation, []*bucket.Reservation, bool) {
	for spin := 0; spin < 3 && g.queued.Load() == 0 && !g.paused.Load(); spin++ {
		if g.cfg.MaxInFlight > 0 && g.inFlight.Load() >= int64(cls.slots) {
			runtime.Gosched()
			continue
		}
		if g.dimPaused(ch, g.now()) {
			return nil, nil, false // a charged dimension is paused: queue
		}
		r, dres, ok := g.reserveAll(cost, ch, cls.p.Reserve)
		if !ok {
			return nil, nil, false // not every bucket has it now: queue
		}
		if g.takeSlot(cls.slots) {
			g.countAdmitted(attempt)
			g.observe(ResultAdmitted, "", cost, attempt, 0)
			return r, dres, true
		}
		cancelAll(r, dres) // lost the last slot to another caller: exact refund
	}
	return nil, nil, false
}

// dimPaused reports whether a dimension charged by ch is paused at now.
func (g *Gate) dimPaused(ch []int64, now time.Time) bool {
	for i, d := range g.dims {
		if ch[i] > 0 && d.pausedUntil.Load() > now.UnixNano() {
			return true
		}
	}
	return false
}

// dimPauseEnd is the latest end of the pauses of the dimensions ch
// charges (zero: none).
func (g *Gate) dimPauseEnd(ch []int64) time.Time {
	var end int64
	for i, d := range g.dims {
		if ch != nil && ch[i] > 0 {
			end = max(end, d.pausedUntil.Load())
		}
	}
	if end == 0 {
		return time.Time{}
	}
	return time.Unix(0, end)
}

// reserveAll takes cost and every dimension's charge now, each within the
// share of a class whose reserve is ppm, or nothing.
func (g *Gate) reserveAll(cost int64, ch []int64, ppm uint32) (*bucket.Reservation, []*bucket.Reservation, bool) {
	r, err := g.b.ReserveClass(cost, 0, ppm)
	if err != nil {
		return nil, nil, false
	}
	dres := make([]*bucket.Reservation, len(g.dims))
	for i, d := range g.dims {
		if dres[i], err = d.b.ReserveClass(ch[i], 0, ppm); err != nil {
			cancelAll(r, dres[:i])
			return nil, nil, false
		}
	}
	return r, dres, true
}

// cancelAll returns reservations exactly.
func cancelAll(r *bucket.Reservation, dres []*bucket.Reservation) {
	if r != nil {
		r.Cancel()
	}
	for _, x := range dres {
		if x != nil {
			x.Cancel()
		}
	}
}

// tryNow is acquire's fast path: nobody ahead, no pause, a slot: tokens
// now or not (ok false: queue). The tokens are taken before the slot so
// that a slot is held only while the call runs. When only a slot is
// missing, it yields a few times first: on a busy machine its holder is
// often a goroutine preempted before releasing it, and queueing behind it
// would turn every later caller into a waiter (a convoy) for nothing. A
// call of a class with a reserve takes only within its class's share
// (bucket.ReserveClass) and the class's share of MaxInFlight.
func (g *Gate) tryNow(cost int64, attempt int, wantRes bool, cls class) (*bucket.Reservation, bool) {
	for spin := 0; spin < 3 && g.queued.Load() == 0 && !g.paused.Load(); spin++ {
		if g.cfg.MaxInFlight > 0 && g.inFlight.Load() >= int64(cls.slots) {
			runtime.Gosched()
			continue
		}
		if wantRes || cls.p.Reserve > 0 {
			r, err := g.b.ReserveClass(cost, 0, cls.p.Reserve)
			if err != nil {
				break // no tokens now: queue
			}
			if g.takeSlot(cls.slots) {
				g.countAdmitted(attempt)
				g.observe(ResultAdmitted, "", cost, attempt, 0)
				if !wantRes {
					return nil, true
				}
				return r, true
			}
			r.Cancel() // lost the last slot to another caller: exact refund
			continue
		}
		d, receipt, _ := g.b.Take(cost)
		if !d.Allowed {
			break
		}
		if g.takeSlot(cls.slots) {
			g.countAdmitted(attempt)
			g.observe(ResultAdmitted, "", cost, attempt, 0)
			return nil, true
		}
		g.b.Undo(receipt)
	}
	return nil, false
}
