// Batching: concurrent Takes share script calls, at most maxInFlight at once.

package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/tracing"
)

// call is one request in a batch.
type call struct {
	items  []store.Item
	slotID string
	undo   string // the undo id of a cluster's request over several hash slots with a fair share ("" for none)
	ok     bool
	err    error
	at     time.Time     // when the script's answer arrived
	took   time.Duration // the script's run time, when it could tell (booked, on Redis TIME)
	queued bool          // decided by another caller's batch: signal done
	done   chan struct{} // buffered: one signal per use, so calls are reused
	self   [1]*call      // a batch of just this call, without allocating
	span   tracing.Span  // the caller's span (tracing.FromContext), told the batch size
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// Batching: at most maxInFlight script calls are in flight; a request
// that finds them all busy queues, and the next call to finish sends the
// queue (up to maxBatch requests, of which at most maxBookings book) as
// one script call. A lone caller is never delayed; many callers share
// round trips and script calls. Bookings are bounded apart because a
// booking takes the script about 30 µs and every wait of a batch counts
// from the script's start where Redis cannot tell the script's run time
// (7.2 and later freeze TIME): with 64 bookings a batch would make each
// about 2 ms late, with 8 about 0.25 ms.
const (
	maxInFlight = 2
	maxBatch    = 64
	maxBookings = 8
)

// submit runs c at once (returning true) when a slot is free, else queues
// it (false; c.done closes when it is decided).
func (s *Store) submit(ctx context.Context, c *call) bool {
	c.span = tracing.FromContext(ctx)
	s.mu.Lock()
	if s.inflight < maxInFlight {
		s.inflight++
		s.mu.Unlock()
		s.run(ctx, c.self[:]) // its own call: the caller's deadline applies
		s.next()
		return true
	}
	c.queued = true
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	return false
}

// unqueue takes c out of the queue when it is still there (not yet sent in
// a batch); false when a batch has it.
func (s *Store) unqueue(c *call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue {
		if q == c {
			c.span = nil
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return true
		}
	}
	return false
}

// next hands the slot to the queued requests: one goroutine sends batch
// after batch while requests keep queueing, then frees the slot.
func (s *Store) next() {
	if batch := s.dequeue(); batch != nil {
		go func() {
			for ; batch != nil; batch = s.dequeue() {
				s.run(context.Background(), batch)
			}
		}()
	}
}

// dequeue takes the next batch from the queue, or frees the caller's slot
// and returns nil when the queue is empty.
func (s *Store) dequeue() []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.inflight--
		return nil
	}
	n, booking := 0, 0
	for n < len(s.queue) && n < maxBatch {
		if c := s.queue[n]; len(c.items) > 0 && c.items[0].MaxWait > 0 {
			if booking == maxBookings {
				break
			}
			booking++
		}
		n++
	}
	batch := make([]*call, n)
	copy(batch, s.queue)
	s.queue = append(s.queue[:0], s.queue[n:]...)
	return batch
}

// run decides a batch in one script call (bounded by the store timeout)
// and closes every call's done.
func (s *Store) run(ctx context.Context, batch []*call) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n := 0
	for _, c := range batch {
		n += len(c.items)
	}
	keys := make([]string, 0, n)
	// The batch's specs, each sent once (with its items' base: an
	// override's items share their key with the usual spec's).
	type specBase struct{ sp, base *store.Spec }
	var specBuf [8]specBase
	specs := specBuf[:0]
	index := func(sp, base *store.Spec) int {
		for i, x := range specs {
			if x.sp == sp && x.base == base {
				return i + 1
			}
		}
		specs = append(specs, specBase{sp, base})
		return len(specs)
	}
	var shareKeysOf []string // fair-share items' tenant sets, after the items' keys
	tail := make([]string, 0, 1+4*len(batch)+2*n)
	tail = append(tail, itoa(int64(len(batch))))
	for _, c := range batch {
		mw := ""
		if len(c.items) > 0 && c.items[0].MaxWait > 0 {
			mw = hex64(int64(c.items[0].MaxWait))
		}
		rsv := "" // the request's priority class's reserve (store.Item.Reserve)
		if len(c.items) > 0 && c.items[0].Reserve != 0 {
			rsv = itoa(int64(c.items[0].Reserve))
		}
		tail = append(tail, c.slotID, itoa(int64(len(c.items))), mw, rsv)
		for i := range c.items {
			it := &c.items[i]
			k := s.Key(it.Spec.Kind, it.Key)
			keys = append(keys, k)
			cost := itoa(it.Cost)
			if it.Cost >= 1<<53 {
				cost = "x" + hex64(it.Cost)
			}
			if sharing(it) {
				h, z := shareKeys(k)
				tail = append(tail, itoa(int64(index(it.Spec, it.Base)))+"f", cost)
				tail = shareFields(tail, it, n+len(shareKeysOf)+1, c.undo)
				shareKeysOf = append(shareKeysOf, h, z)
				continue
			}
			tail = append(tail, itoa(int64(index(it.Spec, it.Base))), cost)
		}
	}
	keys = append(keys, shareKeysOf...)
	args := make([]string, 0, 3+10*len(specs)+len(tail))
	args = append(args, s.now(), s.expire(), itoa(int64(len(specs))))
	for _, x := range specs {
		a := s.argsOf(x.sp)
		args = append(args, a.tag)
		args = append(args, a.fields...)
		args = append(args, s.baseMark(x.sp, x.base))
	}
	args = append(args, tail...)
	r := s.scripts.take(ctx, keys, args)
	at := time.Now()
	took, err := s.decode(r, batch)
	if err != nil {
		if r.Error() != nil {
			err = s.fail("take", r.Error())
		} else { // a reply the store cannot read
			err = s.fail("take", &Error{Op: "take", Class: ClassOther, Err: err})
		}
	}
	for _, c := range batch {
		c.at, c.took = at, took
		if err != nil {
			c.err = err
		}
		traceBatch(c, len(batch), n)
		if c.queued {
			c.done <- struct{}{}
		}
	}
}

// countFromAnswer counts c's booked waits from now, when its caller picks
// up its decision, rather than from the start of the script that made it:
// the script's run time (when it could tell: Redis TIME moves during a
// script only before 7.2) and the time since its answer arrived (a
// batch's callers are woken one after another) are taken off each booked
// item's Wait, to 0 at the least (due now). The pick-up counts only on
// Redis's clock: a script clock (WithScriptClock) is not real time.
func (s *Store) countFromAnswer(items []store.Item, c *call) {
	late := c.took
	if s.cfg.clock == nil {
		late += time.Since(c.at)
	}
	for i := range items {
		if w := &items[i].Wait; *w > 0 {
			*w = max(*w-late, 0)
		}
	}
}
