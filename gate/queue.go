// The queue: booking a waiting caller (within its priority class's share),
// waking it, removing it. FIFO within a class; a higher class passes a
// lower one that cannot go yet.

package gate

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

type waiter struct {
	cost     int64
	res      *bucket.Reservation
	ch       []int64               // cost per dimension (nil: none)
	dres     []*bucket.Reservation // its reservations
	ready    time.Time             // when the booked tokens are there
	limit    time.Time             // latest acceptable admission; zero: none
	wake     chan struct{}
	attempt  int
	cls      class // its priority class (rank -1: none)
	admitted bool  // a slot was handed over by dispatchLocked
	err      error // set when rebooking failed
}

// readyLocked returns when w may be admitted as far as tokens and the
// server's pause go.
func (g *Gate) readyLocked(w *waiter) time.Time {
	ready := w.ready
	if g.pausedUntil.After(ready) {
		ready = g.pausedUntil
	}
	if end := g.dimPauseEnd(w.ch); end.After(ready) {
		ready = end
	}
	return ready
}

// dispatchLocked admits waiters in arrival order while they are ready
// and slots are free, handing each its slot and waking it. A waiter that
// cannot go yet (its tokens, a pause, its class's share of MaxInFlight)
// holds back every waiter behind it of its class or a lower one, never
// one of a higher class (nor, behind a classed waiter, one naming no
// class): those go when they are ready, the bucket's line having booked
// their tokens after the lower class's. Without classes this is FIFO. A
// waiter that cannot go sleeps until its ready time (its own timer) or
// until a release hands it a slot.
func (g *Gate) dispatchLocked(now time.Time) {
	held := len(g.cfg.Priorities) // the waiters of this rank and lower are held back
	for i := 0; i < len(g.queue); {
		w := g.queue[i]
		if w.cls.rank >= held {
			i++
			continue
		}
		if w.err == nil && !now.Before(g.readyLocked(w)) && g.takeSlot(w.cls.slots) {
			g.dropLocked(i)
			w.admitted = true
			g.countAdmitted(w.attempt)
			signal(w)
			continue
		}
		if held = w.cls.rank; held < 0 || g.cfg.MaxInFlight > 0 && g.inFlight.Load() >= int64(g.cfg.MaxInFlight) {
			return // every waiter behind is held back, or no slot is free
		}
		i++
	}
}

// dropLocked takes the i-th waiter out of the queue (the head in O(1)).
func (g *Gate) dropLocked(i int) {
	if i == 0 {
		g.queue[0] = nil
		g.queue = g.queue[1:]
	} else {
		n := copy(g.queue[i:], g.queue[i+1:])
		g.queue[i+n] = nil
		g.queue = g.queue[:i+n]
	}
	g.queued.Add(-1)
}

// enqueue books cost for a caller of class cls that must wait and queues
// it; refused (with the error given to the caller) when the queue is
// full, a pause lasts longer than the caller may wait (its class's
// MaxQueue included), or the tokens would come too late.
func (g *Gate) enqueue(ctx context.Context, cost int64, attempt int, ch []int64, cls class) (*waiter, time.Time, error) {
	g.mu.Lock()
	now := g.now()
	if g.paused.Load() && !g.pausedUntil.After(now) {
		g.pausedUntil = time.Time{}
		g.paused.Store(false)
	}
	if len(g.queue) >= g.cfg.MaxQueue {
		g.mu.Unlock()
		var err error
		if g.cfg.MaxQueue == 0 {
			err = sluice.Errorf(sluice.ErrQueueFull, "%q: cannot wait: MaxQueue is 0, so no caller may wait (set Config.MaxQueue to let callers queue)", g.name)
		} else {
			err = sluice.Errorf(sluice.ErrQueueFull, "%q: %d callers already wait (MaxQueue %d)", g.name, g.cfg.MaxQueue, g.cfg.MaxQueue)
		}
		g.reject(err, ReasonQueueFull, cost, attempt, 0)
		return nil, time.Time{}, err
	}
	budget := cls.p.MaxWait(g.budget(ctx, now))
	pause := g.pausedUntil.Sub(now)
	if end := g.dimPauseEnd(ch); !end.IsZero() {
		pause = max(pause, end.Sub(now))
	}
	if pause > budget {
		g.mu.Unlock()
		err := sluice.Errorf(sluice.ErrWaitTooLong, "%q is paused by a server hint for %v, more than the %v allowed", g.name, pause, budget)
		g.reject(err, ReasonWaitTooLong, cost, attempt, 0)
		return nil, time.Time{}, err
	}
	res, dres, ready, err := g.bookLocked(now, cost, ch, budget, cls.p.Reserve)
	if err != nil {
		g.mu.Unlock()
		err = fmt.Errorf("%q: %w", g.name, err)
		g.reject(err, ReasonWaitTooLong, cost, attempt, 0)
		return nil, time.Time{}, err
	}
	w := &waiter{cost: cost, res: res, ch: ch, dres: dres, ready: ready, wake: make(chan struct{}, 1), attempt: attempt, cls: cls}
	if budget != time.Duration(math.MaxInt64) {
		w.limit = now.Add(budget)
	}
	g.queue = append(g.queue, w)
	g.queued.Add(1)
	g.dispatchLocked(now) // it may go at once (a slot, and tokens now)
	g.mu.Unlock()
	return w, now, nil
}

// bookLocked books cost and the charges ch (nil: none) at now within
// budget and the share of a class whose reserve is ppm
// (bucket.ReserveClassAt), all or nothing, and returns when they are all
// there.
func (g *Gate) bookLocked(now time.Time, cost int64, ch []int64, budget time.Duration, ppm uint32) (*bucket.Reservation, []*bucket.Reservation, time.Time, error) {
	res, err := g.b.ReserveClassAt(now, cost, budget, ppm)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	ready := now.Add(res.DelayFrom(now))
	if ch == nil {
		return res, nil, ready, nil
	}
	dres := make([]*bucket.Reservation, len(g.dims))
	for i, d := range g.dims {
		if dres[i], err = d.b.ReserveClassAt(now, ch[i], budget, ppm); err != nil {
			cancelAll(res, dres[:i])
			return nil, nil, time.Time{}, fmt.Errorf("dimension %q: %w", d.name, err)
		}
		if r := now.Add(dres[i].DelayFrom(now)); r.After(ready) {
			ready = r
		}
	}
	return res, dres, ready, nil
}

// wait blocks until w, at the head of the queue, has its tokens, the pause
// has passed and a slot is free; or until its limit or ctx ends it.
func (g *Gate) wait(ctx context.Context, w *waiter, start time.Time) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		g.mu.Lock()
		if w.err != nil {
			g.removeLocked(w)
			g.mu.Unlock()
			return w.err
		}
		now := g.now()
		if !w.admitted {
			g.dispatchLocked(now)
		}
		if w.admitted {
			g.mu.Unlock()
			g.observe(ResultAdmitted, "", w.cost, w.attempt, now.Sub(start))
			return nil
		}
		ready := g.readyLocked(w)
		if !w.limit.IsZero() && (ready.After(w.limit) || !now.Before(w.limit)) {
			g.removeLocked(w)
			g.mu.Unlock()
			err := sluice.Errorf(sluice.ErrWaitTooLong, "%q: admission at %v would exceed the wait allowed (%v)",
				g.name, ready.Sub(start), w.limit.Sub(start))
			g.reject(err, ReasonWaitTooLong, w.cost, w.attempt, now.Sub(start))
			return err
		}
		// Sleep until ready (if not yet), or the limit, or a signal.
		var sleep time.Duration = -1
		if now.Before(ready) {
			sleep = ready.Sub(now)
		} else if !w.limit.IsZero() {
			sleep = w.limit.Sub(now)
		}
		g.mu.Unlock()
		var tc <-chan time.Time
		if sleep >= 0 {
			if timer == nil {
				timer = time.NewTimer(sleep)
			} else {
				timer.Reset(sleep)
			}
			tc = timer.C
		}
		select {
		case <-w.wake:
		case <-tc:
		case <-ctx.Done():
			g.mu.Lock()
			admitted := w.admitted // handed a slot just before ctx ended
			g.removeLocked(w)
			g.mu.Unlock()
			if admitted {
				g.release()
			}
			g.reject(ctx.Err(), ReasonCanceled, w.cost, w.attempt, g.now().Sub(start))
			return ctx.Err()
		}
	}
}

// removeLocked takes w out of the queue (if it is still there), returns its
// tokens exactly, and books the waiters behind it again (each within its
// class's share) so that they move forward. Every cancel is exact
// whatever the order of the bookings (bucket.Reservation.Cancel), so a
// waiter admitted out of arrival order (a higher class passing a lower
// one) changes nothing here.
func (g *Gate) removeLocked(w *waiter) {
	i := 0
	for i < len(g.queue) && g.queue[i] != w {
		i++
	}
	inQueue := i < len(g.queue)
	if !inQueue {
		i = -1 // admitted already: book every waiter again (the earlier ones only keep their place)
	}
	behind := append([]*waiter(nil), g.queue[i+1:]...)
	for j := len(behind) - 1; j >= 0; j-- {
		cancelAll(behind[j].res, behind[j].dres)
	}
	cancelAll(w.res, w.dres)
	if inQueue {
		g.queue = append(g.queue[:i], behind...)
		g.queued.Add(-1)
	}
	now := g.now()
	for _, v := range behind {
		if v.err != nil {
			continue
		}
		r, dres, ready, err := g.bookLocked(now, v.cost, v.ch, time.Duration(math.MaxInt64), v.cls.p.Reserve)
		if err != nil {
			// Cannot happen (the same tokens just came back), but if it did
			// the waiter fails rather than run unpaid.
			v.res, v.dres, v.err = nil, nil, err
		} else {
			v.res, v.dres, v.ready = r, dres, ready
		}
		signal(v)
	}
	g.dispatchLocked(now)
}
