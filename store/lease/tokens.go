// How long leased tokens may be spent, and how the rest go back: each
// leased token is spent only while the shared bucket could not yet have
// refilled past it, so that the leases never add to a full bucket's B
// (docs/behaviour.md 5.3).
package lease

import (
	"context"
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Why leased tokens expire as the bucket refills.
//
// A token bucket's state is its theoretical arrival time (TAT): a take of
// c tokens at t moves the TAT by c tokens' refill time from max(TAT, t),
// and is admitted while TAT - t <= B/r. Each token taken so holds an interval
// of refill time [v, v + 1/r) with v >= t; the intervals of all takes are
// disjoint and lie below TAT, and the bucket holds B - r*(TAT - t). That
// is why a shared bucket admits at most B + r*Δt in any window Δt.
//
// A leased token spent at s counts as a take at s. Its interval was given at
// the fetch, t <= s; a spend is as good as a take at s exactly while
// v >= s (the interval is not yet reached by the refill): spent later, its
// token would come on top of what the bucket refilled meanwhile (a lease
// of 200 tokens taken from a full bucket of 1,000 and kept while the bucket
// refills to 1,000 would let 1,200 through at one instant). So a leased
// token is spendable until its interval's start, and the tokens of a lease are
// spent lowest interval first.
//
// The fetch's answer gives the intervals: a take of c tokens answered with
// ResetAfter R (the time until the bucket is full again, which is when
// the refill reaches the TAT) puts the k-th token from the top of the
// batch at v = t + R - k/r. The request's own cost (the deficit) is the
// bottom of the batch, decided by the shared store when it took it; the
// lease holds the top. An entry keeps its tokens as the model "n tokens
// whose intervals are packed just below end": token k from the top (k = 1..n)
// is spendable until end - k*tau, so at now floor((end - now)/tau) of
// them are (tau: one token's refill time, rounded up; end: the fetch's
// local time before the round trip, plus R, less 1 ns for rounding: both
// earlier than the truth, never later). A second batch over tokens still
// held keeps the model conservative: end becomes min(new end, old end +
// extra*tau).
//
// Returning tokens (--lease-ttl, a changed limit, Close) gives back the
// top n live ones, on the shared store's clock (the fetch's RefundBefore,
// which is the store's time of the take plus R): the return is applied
// only before the lowest of them reaches its interval (the Adjustment's
// RefundBefore), so a late return never returns a token the bucket has
// refilled past.

// returnMargin is how long a return may take to reach the shared store:
// tokens that reach their interval within it are not returned (they would be
// spendable by nobody by then), so that a return under way is not refused
// whole for its lowest token.
const returnMargin = 10 * time.Millisecond

// tokenNanos is one token's refill time under sp's bucket in ns, rounded
// up (at least 1); math.MaxInt64 when it does not fit.
func tokenNanos(sp *store.Spec) int64 {
	p := &sp.Bucket
	num, den, _ := p.Ratio()
	hi, lo := bits.Mul64(uint64(p.Unit()), den)
	if num == 0 || hi >= num {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, num)
	if rem != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return max(int64(q), 1)
}

// addSat is a + b, saturating at the int64 range.
func addSat(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// mulSat is n*tau for n, tau >= 0, saturating.
func mulSat(n, tau int64) int64 {
	hi, lo := bits.Mul64(uint64(n), uint64(tau))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// spendable is how many of e's tokens may be spent at now (local ns).
func (e *entry) spendable(now int64) int64 {
	if e.tokens <= 0 || e.end <= now {
		return 0
	}
	return min(e.tokens, (e.end-now)/e.tau)
}

// addBatch puts extra leased tokens, the top of a batch whose intervals end
// at end (local ns) and endStore (the store's clock), over e's tokens
// (already pruned).
func (e *entry) addBatch(extra, end, endStore int64) {
	if extra <= 0 {
		return
	}
	if e.tokens <= 0 {
		e.end, e.endStore = end, endStore
	} else {
		span := mulSat(extra, e.tau)
		e.end = min(end, addSat(e.end, span))
		e.endStore = min(endStore, addSat(e.endStore, span))
	}
	e.tokens += extra
}

// ret is a lease to return: its tokens and where their intervals end.
type ret struct {
	key                        string
	spec                       *store.Spec
	tokens, end, endStore, tau int64
}

func (e *entry) ret(key string) ret {
	return ret{key: key, spec: e.spec, tokens: e.tokens, end: e.end, endStore: e.endStore, tau: e.tau}
}

// adjustment is the return of r's tokens sent at now (local ns): the top
// ones still spendable returnMargin from now, refunded only before the
// lowest of them reaches its interval on the store's clock; false when none.
func (r ret) adjustment(now int64) (store.Adjustment, bool) {
	e := entry{tokens: r.tokens, end: r.end, tau: r.tau}
	n := e.spendable(addSat(now, int64(returnMargin)))
	if n <= 0 || r.endStore <= 0 {
		return store.Adjustment{}, false
	}
	before := r.endStore - mulSat(n, r.tau)
	if before <= 0 {
		return store.Adjustment{}, false
	}
	return store.Adjustment{Key: r.key, Spec: r.spec, Delta: -n, RefundBefore: before}, true
}

// pruneLocked forfeits e's tokens that are no longer spendable at now.
func (s *Store) pruneLocked(e *entry, now int64) {
	if d := e.tokens - e.spendable(now); d > 0 {
		e.tokens -= d
		s.leased.Add(-d)
	}
}

// expireLocked stops e's tokens from being spent and queues them for
// return (the janitor sends them; no round trip under a shard lock).
func (s *Store) expireLocked(key string, e *entry) {
	if e.tokens <= 0 {
		return
	}
	s.leased.Add(-e.tokens)
	s.pendMu.Lock()
	s.pend = append(s.pend, e.ret(key))
	s.pendMu.Unlock()
	e.tokens = 0
}

// janitor returns the tokens of expired and idle leases.
func (s *Store) janitor() {
	defer close(s.done)
	t := time.NewTicker(max(s.ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep(false)
		}
	}
}

// sweep returns the tokens of leases past their TTL (all of them when
// all is set) and forgets keys idle for a TTL.
func (s *Store) sweep(all bool) {
	now := s.now()
	s.pendMu.Lock()
	rets := s.pend
	s.pend = nil
	s.pendMu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			s.pruneLocked(e, now)
			if e.tokens > 0 && (all || e.expires <= now) {
				rets = append(rets, e.ret(k))
				s.leased.Add(-e.tokens)
				e.tokens = 0
			}
			if e.tokens == 0 && e.flight == nil && (all || now-e.lastUse > int64(s.ttl)) {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
	var adj []store.Adjustment
	for _, r := range rets {
		if a, ok := r.adjustment(now); ok {
			adj = append(adj, a)
		}
	}
	if len(adj) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.trips.Add(1)
		s.inner.Adjust(ctx, adj)
	}
}
