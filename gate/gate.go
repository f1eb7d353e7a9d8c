// Package gate admits outgoing calls to tools and APIs the caller does not
// own (an agent calling tools, a service calling an LLM provider or a
// partner API) so that they stay inside the other side's limits
// (docs/behaviour.md section 3).
//
// A Gate combines an exact token bucket (the rate and burst), an in-flight
// cap (calls admitted but not finished), a capped FIFO queue of callers
// willing to wait (FIFO within a priority class), server retry hints that pause every caller, and bounded,
// jittered retries, and optionally priority classes (Config.Priorities,
// the Priority option) that keep a share of every budget for the higher
// classes, and on a shared gate fair shares between tenants
// (Config.FairShare, the Tenant option). It has no background goroutines or tickers: all work
// happens on the callers' goroutines (a shared gate adds one timer per
// in-flight call, renewing its slot), so a Gate needs no Close and can be
// created freely, including inside testing/synctest bubbles.
//
// # Shared gates
//
// With Config.Store set, the gate's budgets, in-flight slots and pauses
// live in that store (store/redisstore for many processes), under keys
// "gate:{NAME}:requests", "gate:{NAME}:d:DIMENSION" and
// "gate:{NAME}:in_flight" (one Redis Cluster hash slot), so that every gate
// of that Name on that store shares one budget: the workers of a fleet
// calling one provider key. Then:
//
//   - an admission is one store decision that books the call in the
//     store's line when it must wait (FIFO by arrival at the store, across
//     processes, large costs never starved), then a local sleep; a caller
//     whose turn would come after MaxWait, its context's deadline or
//     MaxSharedWait is refused at once and books nothing;
//   - a caller that gives up (its context ends, also during the store's
//     round trip) returns its booking exactly; Settle and SettleCharge
//     correct the store's buckets (a settle whose store write failed may
//     be tried again); a cost-0 call waits behind the line;
//   - in-flight slots are held in the store: a slot is renewed every
//     SlotTTL/3 until its call ends and returns SlotTTL after a worker
//     that crashed holding it stopped renewing it. A caller waiting only
//     for a slot tries again when this process frees one, else after a
//     jittered pause of at most 50 ms (a slot freed elsewhere sends no
//     signal). The slot is taken with the booking and renewed from then
//     on, so it is held while the caller sleeps until its turn;
//   - Pause, PauseDimension and Lower act on the store, so a hint seen by
//     one worker reaches all: a paused bucket restarts empty when the
//     pause ends, and callers booked before the hint keep their turn
//     (this process's own booked callers wait for its pauses, of the gate
//     or of a dimension they charge); Lower is one atomic ceiling
//     (store.Adjustment.Lower);
//   - MaxQueue bounds the callers of this process that wait (one admitted
//     at once holds no place), not of the fleet; Stats and Event report this process's counts, and as tokens
//     the remaining after this process's last decision;
//   - a store error refuses the call with that error (reason
//     [ReasonStoreError]); store/failover decides what an outage means.
//
// StartEmpty does not apply to a shared gate (its buckets start full in
// the store), and MaxInFlight needs a store that can renew slots
// (store.Renewer: every store of this module).
package gate

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/tracing"
)

// Retry is the retry policy of Gate.Do. Errors that carry a server hint
// (WithRetryAfter) or are marked Retryable are retried; others are not.
type Retry struct {
	// MaxAttempts is the number of attempts in total, the first included.
	// 0 and 1 both mean one attempt and no retry.
	MaxAttempts int
	// BaseDelay and MaxDelay bound the pause before a retry: the n-th retry
	// waits a uniformly random time in [BaseDelay, min(MaxDelay,
	// BaseDelay*2^n)] ("full jitter" over an exponential window), so that
	// callers do not come back in a wave, and never less than a server's
	// hint. Both 0 means retries are paced by the tokens alone. MaxDelay
	// must not be below BaseDelay.
	BaseDelay, MaxDelay time.Duration
}

// Config configures a Gate. Every zero value has the meaning documented on
// its field; invalid values make New return an error naming the field.
type Config struct {
	// Name labels the gate in logs and events (the field "limiter" of
	// docs/behaviour.md section 6).
	// Empty means "gate".
	Name string
	// Limit is the token bucket: Capacity is the burst, Rate the tokens per
	// second. Required. The bucket starts full unless StartEmpty is set.
	Limit      bucket.Limit
	StartEmpty bool
	// MaxInFlight caps the calls admitted and not yet finished; 0 means no
	// cap. A slot is released when the call returns, panics or its ticket
	// is released.
	MaxInFlight int
	// MaxQueue is how many callers may wait for admission at once; beyond
	// it a caller is refused at once with sluice.ErrQueueFull. 0 (the zero
	// value) means the gate never waits: every call that cannot be admitted
	// at once is refused with sluice.ErrQueueFull, whatever MaxWait says.
	MaxQueue int
	// MaxWait is the longest a caller waits for admission (tokens, a
	// server's pause, and a free slot); a caller whose admission would come
	// later, by it or by its context's deadline, is refused at once with
	// sluice.ErrWaitTooLong and consumes nothing. A server hint longer than
	// MaxWait refuses at once too. 0 means no limit but the context's.
	MaxWait time.Duration
	// Dimensions are budgets beyond Limit (which is the per-call
	// "requests" budget): tokens, or input and output tokens, each a token
	// bucket of its own (starting full unless StartEmpty). A call is
	// admitted when every dimension admits it, all or nothing; Charge gives
	// a call's cost in a dimension (0 without one). Names must be unique
	// and not empty.
	Dimensions []Dimension
	// Retry is the retry policy of Do. The zero value means no retry.
	Retry Retry
	// Clock is the time source for decisions; nil means the system clock.
	// Waiting always uses real timers (virtual inside a synctest bubble).
	Clock sluice.Clock
	// Logger receives a record for each refusal and each pause, with the
	// field names of docs/behaviour.md section 6, at most about 10 records a second (the rest are
	// counted in the next record's "suppressed" field). Nil logs nothing.
	Logger *slog.Logger
	// Observe, if set, is called for every admission decision (admitted or
	// refused, original or retry); it is the hook for metrics. It is called
	// with no lock held and must be safe for concurrent use.
	Observe func(Event)
	// Tracer, when set, makes each admission a span "sluice.gate.acquire"
	// (gate/trace.go), a child of the context's span or traceparent
	// (tracing.WithParent); nil traces nothing.
	Tracer tracing.Tracer
	// Priorities are the gate's priority classes, highest first, with the
	// fields of a policy's priorities: a call of class c (the Priority
	// option) is admitted or booked only if each budget's new theoretical
	// arrival time is at most now + (1 − c's Reserve)·τ + min(its wait,
	// c's MaxQueue when QueueBounded) (docs/behaviour.md section 7), and
	// with MaxInFlight fills at most MaxInFlight·(1 − Reserve) slots
	// (rounded down; a class left none is an error). A call naming no
	// class has none (the whole budget). Shared gates apply the rule in
	// the store; a gate in process on its own buckets, its queue being
	// FIFO within a class while a higher class (or a call naming none)
	// passes a waiter of a lower class that cannot go yet, so that a
	// higher class is never delayed by a lower one beyond the lower
	// class's MaxQueue.
	Priorities []policy.Priority
	// FairShare divides a shared gate's budgets between tenants (the
	// Tenant option) while they are contended (fairshare.go,
	// docs/behaviour.md section 8); the zero FairShare: none. Only with a
	// Store.
	FairShare FairShare
	// Store, when set, makes the gate shared: its budgets (Limit and
	// Dimensions), in-flight slots and pauses live in that store under
	// Name, so that every gate of that Name on that store, in any process
	// on any host, shares one budget. See "Shared gates" in the package
	// documentation. Nil: the gate lives in this process alone.
	Store store.Store
	// SlotTTL is, for a shared gate with MaxInFlight, how long an
	// in-flight slot outlives a worker that holds it and stops renewing it
	// (a crash): a slot is renewed every SlotTTL/3 from its booking until
	// its call ends. 0 means DefaultSlotTTL (30 s); otherwise at least
	// MinSlotTTL.
	SlotTTL time.Duration
	// LeaseTTL is the former name of SlotTTL, used when SlotTTL is 0.
	//
	// Deprecated: use SlotTTL.
	LeaseTTL time.Duration
	// Adaptive, when set, makes Limit.Rate a ceiling that learns from
	// overload answers (Overloaded, gate/adaptive.go); nil: fixed.
	Adaptive *Adaptive
	// Rand, if set, draws the retry jitter (a seeded source makes retries
	// reproducible); nil uses math/rand/v2's global source. It is used under
	// the gate's lock.
	Rand *rand.Rand
}

// Dimension is a budget of a gate beyond its Limit, e.g. {Name: "tokens",
// Limit: bucket.PerMinute(30000)}.
type Dimension struct {
	Name  string
	Limit bucket.Limit
}

// dim is a dimension's bucket, and the end of its own pause (Unix ns; 0:
// none), set by PauseDimension.
type dim struct {
	name        string
	b           *bucket.Bucket
	limit       bucket.Limit
	pausedUntil atomic.Int64
}

// Gate admits calls; see the package documentation. It is safe for
// concurrent use. Create gates with New: a zero Gate admits nothing and
// never panics; Do and Reserve return an error matching
// sluice.ErrInvalidLimit ("gate: not made with gate.New").
type Gate struct {
	cfg   Config
	name  string
	b     *bucket.Bucket
	limit bucket.Limit
	dims  []*dim         // Config.Dimensions, in order
	logs  *bucket.Bucket // bounds the log rate
	sh    *shared        // Config.Store's state; nil: in process
	ad    *adaptive      // Config.Adaptive's ceiling; nil: none

	// The fast path (nobody waiting, no pause, a free slot, tokens now)
	// takes no lock: it reads queued and paused, takes a slot with a CAS on
	// inFlight and tokens from the lock-free bucket. Everything else is
	// under mu. A slot freed while callers wait is handed to the head of
	// the queue under mu, so waiters are never overtaken.
	inFlight atomic.Int64
	queued   atomic.Int64 // len(queue)
	paused   atomic.Bool  // pausedUntil is set (it may have passed)
	counters counters

	mu          sync.Mutex
	queue       []*waiter
	pausedUntil time.Time
	suppressed  int
}

type counters struct {
	admitted, admittedRetries, retries        atomic.Uint64
	queueFull, waitTooLong, badCost, canceled atomic.Uint64
	storeErrors                               atomic.Uint64
}

// errNotMade is the error of Do and Reserve on a zero Gate.
var errNotMade = sluice.Errorf(sluice.ErrInvalidLimit, "gate: not made with gate.New")

// New returns a gate for cfg, or an error naming the invalid field (it
// matches sluice.ErrInvalidLimit).
func New(cfg Config) (*Gate, error) {
	bad := func(format string, args ...any) error {
		return sluice.Errorf(sluice.ErrInvalidLimit, "gate config: "+format, args...)
	}
	if err := checkPriorities(cfg); err != nil {
		return nil, err
	}
	if err := checkFairShare(cfg); err != nil {
		return nil, err
	}
	switch {
	case cfg.MaxInFlight < 0:
		return nil, bad("MaxInFlight %d must not be negative", cfg.MaxInFlight)
	case cfg.MaxQueue < 0:
		return nil, bad("MaxQueue %d must not be negative", cfg.MaxQueue)
	case cfg.MaxWait < 0:
		return nil, bad("MaxWait %v must not be negative", cfg.MaxWait)
	case cfg.Retry.MaxAttempts < 0:
		return nil, bad("Retry.MaxAttempts %d must not be negative", cfg.Retry.MaxAttempts)
	case cfg.Retry.BaseDelay < 0:
		return nil, bad("Retry.BaseDelay %v must not be negative", cfg.Retry.BaseDelay)
	case cfg.Retry.MaxDelay < cfg.Retry.BaseDelay:
		return nil, bad("Retry.MaxDelay %v must not be below Retry.BaseDelay %v", cfg.Retry.MaxDelay, cfg.Retry.BaseDelay)
	}
	opts := []bucket.Option{}
	if cfg.Clock != nil {
		opts = append(opts, bucket.WithClock(cfg.Clock))
	}
	if cfg.StartEmpty {
		opts = append(opts, bucket.StartEmpty())
	}
	b, err := bucket.New(cfg.Limit, opts...)
	if err != nil {
		return nil, fmt.Errorf("gate config: Limit: %w", err)
	}
	g := &Gate{cfg: cfg, name: cfg.Name, b: b, limit: cfg.Limit}
	for i, d := range cfg.Dimensions {
		if d.Name == "" {
			return nil, bad("Dimensions[%d] has no name", i)
		}
		for _, o := range g.dims {
			if o.name == d.Name {
				return nil, bad("Dimensions: %q given twice", d.Name)
			}
		}
		db, err := bucket.New(d.Limit, opts...)
		if err != nil {
			return nil, fmt.Errorf("gate config: Dimensions %q: %w", d.Name, err)
		}
		g.dims = append(g.dims, &dim{name: d.Name, b: db, limit: d.Limit})
	}
	if g.name == "" {
		g.name = "gate"
	}
	if cfg.Store != nil {
		if g.sh, err = newShared(cfg, g.name); err != nil {
			return nil, err
		}
	}
	if err := g.withAdaptive(cfg); err != nil {
		return nil, err
	}
	if cfg.Logger != nil {
		g.logs, _ = bucket.New(bucket.Limit{Capacity: 20, Rate: 10})
	}
	return g, nil
}

func (g *Gate) now() time.Time {
	if g.cfg.Clock != nil {
		return g.cfg.Clock.Now()
	}
	return time.Now()
}

// Config returns the configuration the gate was made with.
func (g *Gate) Config() Config { return g.cfg }

// Limit returns the gate's token-bucket limit.
func (g *Gate) Limit() bucket.Limit { return g.limit }

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// release frees a slot. When callers wait, the slot goes to the head of the
// queue if it is ready. (A waiter enqueues before it looks for a slot, and
// release frees the slot before it looks for waiters, so no wake-up is lost.)
func (g *Gate) release() {
	g.inFlight.Add(-1)
	if g.queued.Load() > 0 {
		g.mu.Lock()
		g.dispatchLocked(g.now())
		g.mu.Unlock()
	}
}

// takeSlot takes an in-flight slot if fewer than slots are taken (a
// class's share of MaxInFlight, class.slots; any when MaxInFlight is 0).
func (g *Gate) takeSlot(slots int) bool {
	if g.cfg.MaxInFlight == 0 {
		g.inFlight.Add(1)
		return true
	}
	for {
		n := g.inFlight.Load()
		if n >= int64(slots) {
			return false
		}
		if g.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (g *Gate) countAdmitted(attempt int) {
	g.counters.admitted.Add(1)
	if attempt > 1 {
		g.counters.admittedRetries.Add(1)
	}
}

// Do admits a call of the given cost (tokens and an in-flight slot), runs
// fn, releases the slot when fn returns or panics (re-panicking after
// release), and returns fn's error.
//
//   - no waiting room (MaxQueue callers already wait; with MaxQueue 0,
//     any call that cannot pass at once): refused at once with
//     sluice.ErrQueueFull;
//   - admission later than MaxWait or ctx's deadline: refused at once with
//     sluice.ErrWaitTooLong, consuming nothing;
//   - waiters are admitted in arrival order, large costs included (within
//     a priority class: a higher class passes a lower one that must
//     still wait);
//   - a waiter whose ctx ends leaves the queue, its booked tokens return
//     exactly, and Do returns ctx's error;
//   - cost > capacity (with a Priority, the class's view of it):
//     sluice.ErrCostExceedsCapacity at once.
//
// If fn's error carries a server hint (WithRetryAfter), the whole gate
// pauses until the hint has passed. Errors with a hint or marked Retryable
// are retried up to Retry.MaxAttempts in all, each retry admitted through
// the gate again (it costs tokens) and labelled as a retry in logs and
// events. When retries end, Do returns the last error, joined with the
// gate's refusal if a retry was refused admission.
func (g *Gate) Do(ctx context.Context, cost int64, fn func(context.Context) error, opts ...Option) error {
	ch, err := g.charges(opts, false)
	if err == nil {
		ctx, err = g.classed(ctx, opts)
	}
	if err != nil {
		g.reject(err, costReason(err), cost, 1, 0)
		return err
	}
	var last error
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if err := g.beforeRetry(ctx, attempt, last); err != nil {
				return err
			}
		}
		h, err := g.acquire(ctx, cost, attempt, false, ch)
		if err != nil {
			if last != nil {
				return joinErrors(err, last)
			}
			return err
		}
		err = g.run(ctx, fn, h)
		if err == nil {
			return nil
		}
		last = err
		hint, hinted := RetryAfterOf(err)
		if hinted {
			g.Pause(hint)
		}
		if !hinted && !IsRetryable(err) || attempt >= max(g.cfg.Retry.MaxAttempts, 1) || ctx.Err() != nil {
			return err
		}
	}
}

// run calls fn holding the slot taken by acquire, releasing it however fn
// ends.
func (g *Gate) run(ctx context.Context, fn func(context.Context) error, h hold) error {
	defer g.releaseHold(h)
	return fn(ctx)
}

// hold is what an admission holds: its reservations in process (when
// asked for), or a shared gate's admission.
type hold struct {
	res  *bucket.Reservation
	dres []*bucket.Reservation
	sh   *sharedHold
}

// releaseHold frees an admission's slot.
func (g *Gate) releaseHold(h hold) {
	if h.sh != nil {
		h.sh.release()
		return
	}
	g.release()
}

// admit admits cost (and ch, the costs per dimension; nil: none): it
// returns once the tokens and a slot are taken, with the reservations when
// wantRes is set (else nil; a shared gate's admission always).
func (g *Gate) admit(ctx context.Context, cost int64, attempt int, wantRes bool, ch []int64) (hold, error) {
	if g.b == nil {
		return hold{}, errNotMade
	}
	err := bucket.CheckCost(cost, g.limit.Capacity)
	if err == nil {
		err = g.classCostError(ctx, cost, ch)
	}
	if err != nil {
		g.reject(err, costReason(err), cost, attempt, 0)
		return hold{}, err
	}
	if err := ctx.Err(); err != nil {
		return hold{}, err
	}
	if g.sh != nil {
		sh, err := g.acquireShared(ctx, cost, attempt, ch)
		return hold{sh: sh}, err
	}
	g.ad.sync(g) // (an adaptive ceiling may have moved; nil: none)
	cls := g.localClass(ctx)
	if ch != nil {
		if r, dres, ok := g.tryNowDims(cost, attempt, ch, cls); ok {
			return hold{res: r, dres: dres}, nil
		}
	} else if r, ok := g.tryNow(cost, attempt, wantRes, cls); ok {
		return hold{res: r}, nil
	}
	w, now, err := g.enqueue(ctx, cost, attempt, ch, cls)
	if err != nil {
		return hold{}, err
	}
	if err := g.wait(ctx, w, now); err != nil {
		return hold{}, err
	}
	if !wantRes {
		return hold{}, nil
	}
	return hold{res: w.res, dres: w.dres}, nil // rebooking may have replaced them
}
