// Bounded calls to the primary, the circuit's background probe, and the
// hand-back of local levels when the primary answers again.
package failover

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Call states of bounded.
const (
	running int32 = iota
	finished
	abandoned
)

// bounded runs f with a context bounded by the timeout, and returns at the
// deadline whether or not f has: then with an error matching ErrTimeout
// (or the caller's own error, when its context ended first) and done
// false. f keeps running until it returns; late, when set, is then called
// in its goroutine. What f writes may be read only when done is true.
func (s *Store) bounded(ctx context.Context, f func(context.Context) error, late func()) error {
	_, err := s.boundedCall(ctx, f, late)
	return err
}

func (s *Store) boundedCall(ctx context.Context, f func(context.Context) error, late func()) (done bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	var state atomic.Int32
	ch := make(chan error, 1)
	go func() {
		err := f(cctx)
		if state.CompareAndSwap(running, finished) {
			ch <- err
			return
		}
		cancel()
		if late != nil {
			late()
		}
	}()
	select {
	case err := <-ch:
		cancel()
		return true, err
	case <-cctx.Done():
	}
	if !state.CompareAndSwap(running, abandoned) {
		cancel()
		return true, <-ch // it finished at the deadline: its answer stands
	}
	if err := ctx.Err(); err != nil {
		return false, err // the caller gave up (or its own deadline came first)
	}
	return false, fmt.Errorf("%w (%v)", ErrTimeout, s.cfg.Timeout)
}

// callPrimary sends one call to the primary, bounded, unless the circuit
// is open (then store.ErrUnavailable at once); a failure opens it.
func (s *Store) callPrimary(ctx context.Context, f func(context.Context) error) error {
	if !s.usePrimary() {
		return s.unavailable()
	}
	err := s.bounded(ctx, f, nil)
	if outage(ctx, err) {
		s.degrade(err)
		return err
	}
	if err == nil {
		s.recoverFromCall()
	}
	return err
}

// takePrimary is the primary's Take, bounded. The primary decides on a
// copy of the items (copied back when it answers in time), so that a call
// abandoned at the deadline writes nothing the fallback decides on; if it
// admits later with in-flight slots, they are released at once.
func (s *Store) takePrimary(ctx context.Context, items []store.Item) (store.Result, error) {
	cp := make([]store.Item, len(items))
	copy(cp, items)
	var res store.Result
	done, err := s.boundedCall(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.cfg.Primary.Take(ctx, cp)
		return err
	}, func() {
		if res.Allowed && res.Slots.ID != "" {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
			s.cfg.Primary.Release(ctx, res.Slots)
			cancel()
		}
	})
	if err != nil || !done {
		return store.Result{}, err
	}
	copy(items, cp)
	return res, nil
}

// suspect checks the primary in the background after a call that did not
// answer in time but may have been waiting on purpose (a book's Begin
// waiting for a racing first request): one bounded ping at a time, which
// opens the circuit if it fails. Without Ping, nothing.
func (s *Store) suspect() {
	if s.ping == nil || s.degraded.Load() || !s.confirming.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.confirming.Store(false)
		ctx := context.Background()
		if err := s.bounded(ctx, s.ping, nil); outage(ctx, err) {
			s.degrade(err)
		}
	}()
}

// pingAfter sends one ping of the primary, bounded by the timeout, d from
// now; the returned func stops it if it has not started and reports
// whether it answered (an answer that is a refusal included). Without
// Ping, nothing tells: the func reports true.
func (s *Store) pingAfter(d time.Duration) func() bool {
	if s.ping == nil {
		return func() bool { return true }
	}
	var answered atomic.Bool
	t := time.AfterFunc(d, func() {
		ctx := context.Background()
		if err := s.bounded(ctx, s.ping, nil); !outage(ctx, err) {
			answered.Store(true)
		}
	})
	return func() bool {
		t.Stop()
		return answered.Load()
	}
}

// probe pings the primary once per probe interval while degraded, each
// ping bounded by the timeout, and hands back to it when one answers. One
// probe runs at a time (s.probing).
func (s *Store) probe() {
	for {
		s.probeUntilRecovered()
		s.probing.Store(false)
		select {
		case <-s.closed:
			return
		default:
		}
		// Degraded again between the recovery and the flag's reset: go on.
		if !s.degraded.Load() || !s.probing.CompareAndSwap(false, true) {
			return
		}
	}
}

func (s *Store) probeUntilRecovered() {
	t := time.NewTicker(s.cfg.ProbeInterval)
	defer t.Stop()
	for s.degraded.Load() {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		// A refusal (Redis answering OOM, READONLY...) is an answer: the
		// primary is reachable, and its refusals reach the callers.
		if err := s.bounded(context.Background(), s.ping, nil); err != nil && outage(context.Background(), err) {
			s.setCause(err)
			continue
		}
		s.handBack()
	}
}

// handBack lowers every key decided locally during the outage on the
// primary to what its local bucket holds (times Instances), then closes
// the circuit; local decisions wait meanwhile (one bounded call per 512
// keys). If the primary fails to take the levels, the store stays
// degraded and the next probe tries again.
func (s *Store) handBack() {
	s.handoff.Lock()
	defer s.handoff.Unlock()
	adj := s.levels.lowerings(s)
	for len(adj) > 0 {
		n := min(len(adj), 512)
		chunk := adj[:n]
		if err := s.bounded(context.Background(), func(ctx context.Context) error { return s.cfg.Primary.Adjust(ctx, chunk) }, nil); err != nil {
			s.setCause(err) // the next probe tries again, with the levels then
			return
		}
		adj = adj[n:]
	}
	s.levels.endOutage()
	s.recover()
}
