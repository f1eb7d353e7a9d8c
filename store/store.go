// Package store defines where keyed limit state lives. A Store makes one
// all-or-nothing admission over every bucket a request needs, releases
// in-flight slots, and closes. Implementations: store/memstore (in
// process) and store/redisstore (Redis, Redis Cluster); wrappers:
// store/lease (token leasing) and store/failover (what to do when the
// shared store fails). store/storetest is the conformance suite every
// implementation passes.
//
// Every implementation applies the same pure transitions, each kind's in
// the kind table (Kind, Limit and Spec, kind.go: bucket.Params for token
// buckets, window.Limit for windows, quota.Limit for quotas), so that the
// same trace gives identical decisions whatever the store.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// The modes of Spec.OnStoreError (a policy's on_store_error, sluice
// serve's --on-store-error): what a store that can fail (store/failover)
// does for a limit while its backend is unreachable.
const (
	// FailOpen admits the request.
	FailOpen = "fail_open"
	// FailClosed refuses it (ErrUnavailable).
	FailClosed = "fail_closed"
	// Local decides it in process, each instance with its share of the
	// budget (Spec.Scaled).
	Local = "local"
)

// ErrorModes returns the modes of Spec.OnStoreError, in the order they are
// listed to people: FailOpen, FailClosed, Local.
func ErrorModes() []string { return []string{FailOpen, FailClosed, Local} }

// Item is one bucket a request needs: its full key (unique per limit), its
// spec, and the cost to take. Cost 0 peeks. A Concurrency item takes one
// slot whatever its cost (0 peeks). Take writes the item's decision into
// Decision (so that a decision costs no allocation).
type Item struct {
	Key  string
	Spec *Spec
	Cost int64
	// Decision is set by Take. When the request is refused nothing is
	// taken, and every item reports its state as it is (a peek's
	// Remaining and ResetAfter); Allowed then says whether that item alone
	// would have admitted, so the refused items say why.
	Decision sluice.Decision
	// RefundBefore is set by Take on an admitted request: the time (Unix
	// ns, the store's clock) before which Adjust can return this item's
	// cost exactly (the tokens are not yet refilled, the window not yet
	// over). 0 when nothing can be returned.
	RefundBefore int64
	// MaxWait, when positive, lets Take book the request (the same for
	// every item of a request): when it cannot be admitted now but every
	// token-bucket item can take its cost within MaxWait by going into
	// debt (each booking moving the bucket's theoretical arrival time, so
	// that bookings on a key are served in their order of arrival at the
	// store), Take admits it and sets each item's Wait; items of other
	// kinds must admit now. All items or none, as ever.
	MaxWait time.Duration
	// Reserve is the priority class's reserve, in parts per million
	// (ReserveScale) of the item's limit, the same for every item of a
	// request: the item is admitted or booked only within its limit cut
	// by it (Spec.StepReserved, Spec.BookReserved; an in-flight cap's
	// slots by Spec.ReservedSlots). A class's max_queue_ms is applied by
	// the caller, to MaxWait. A refusal of an item with a reserve starts
	// no penalty box (it is the class's share that is short, not the
	// key that is over its limit); a block in force refuses it as any. 0
	// (no class, or a class with no reserve) is the whole limit, as
	// before classes.
	Reserve uint32
	// Tenant is the share holder of this item when its Spec has a
	// FairShare (OtherHolder "" is the shared "other" holder; the limiter
	// makes it the fair_share's `by` descriptor's value, per class
	// "<class>\x1f<tenant>"); Weight is the holder's weight, >= 1 (0
	// counts as 1). Items of other specs ignore both.
	Tenant string
	Weight uint32
	// Base, when set, is the spec the key's state is kept under when
	// Spec is a change of it (a per-key override of a limit's
	// parameters): a SpecConverter converts the state from the spec that
	// wrote it to Spec by the SetLimit rule before deciding (no credit
	// created, tokens above a smaller capacity dropped, debt kept), so
	// that a change of parameters never hands out a burst. Nil: Spec is
	// the key's usual spec.
	Base *Spec
	// Wait is set by Take on an admitted request: how long after Take
	// returns this item's cost is available (0 when it is now). A store
	// counts it from a moment no later than Take's return, so that acting
	// Wait after Take returns is never early; a shared store counts it
	// from as late a moment as it can tell (taking off the time its
	// answer took to come back), so that acting then is not late by it
	// either. The request may act after the largest Wait of its items
	// (Result.Wait). A
	// caller that gives up returns the booking with Adjust (Delta -Cost,
	// before RefundBefore), exactly, whatever was booked after it.
	Wait time.Duration
}

// Adjustment corrects what an admitted item took, for costs known only
// afterwards: Delta < 0 returns -Delta (exactly, if before RefundBefore;
// else nothing, so a late refund never creates credit); Delta > 0 takes
// Delta more at once, whatever the bucket holds (a token bucket goes into
// debt). Concurrency items are not adjusted.
type Adjustment struct {
	Key          string
	Spec         *Spec
	Base         *Spec // as Item.Base
	Delta        int64
	RefundBefore int64
	// Pause, when positive, is a pause instead of a correction (Delta is
	// ignored): a token bucket is made empty exactly Pause from now, its
	// debt reaching to then (bucket.Params.Pause), unless it is already in
	// debt longer; kinds that are not Pausable are not paused.
	Pause time.Duration
	// Lower, when set (and Pause is not), is a ceiling instead of a
	// correction: a token bucket is left holding at most Delta tokens now
	// (bucket.Params.Lower: exactly Delta when it held more, unchanged
	// otherwise; a negative Delta counts as 0), in one atomic step, also on
	// a key that does not exist (a new, full state); kinds that are not
	// Pausable are not lowered. A provider's own count of what is left, for example.
	Lower bool
}

// Op says what an adjustment does, for stores: 'p' a pause, 'l' a
// ceiling (Lower), '+' a charge, '-' a return, 0 nothing to apply (no
// key or spec, a kind that holds slots, a zero Delta, or a pause or
// ceiling on a kind that is not Pausable).
func (a *Adjustment) Op() byte {
	switch {
	case a.Spec == nil || a.Key == "" || a.Spec.HoldsSlots():
		return 0
	case a.Pause > 0 || a.Lower:
		if !a.Spec.Kind.Pausable() {
			return 0
		}
		if a.Pause > 0 {
			return 'p'
		}
		return 'l'
	case a.Delta > 0:
		return '+'
	case a.Delta < 0:
		return '-'
	}
	return 0
}

// Result is the outcome of Take.
type Result struct {
	// Allowed is true when every item was admitted (and all took their
	// cost); false when any was refused (and none took anything). Each
	// item's own decision is in its Decision field.
	Allowed bool
	// Slots identifies the slots taken by Concurrency items; release it
	// with Release. Empty when there were none.
	Slots Slots
	// Wait is, for an admitted request, the largest Wait of its items: the
	// request may act that long after Take returns (0: at once).
	Wait time.Duration
}

// Slots names the in-flight slots one admission took.
type Slots struct {
	ID   string
	Keys []string
}

// Lease is the former name of Slots.
//
// Deprecated: use Slots.
type Lease = Slots

// Store is where keyed limit state lives. Implementations are safe for
// concurrent use.
type Store interface {
	// Take admits all items or none: a request refused by any item
	// consumes from none of them. Items must have distinct keys; costs
	// must be within 0..Spec.Capacity() (else ErrInvalidItem).
	Take(ctx context.Context, items []Item) (Result, error)
	// Release frees the slots before they expire. Releasing an
	// unknown or expired slot is not an error.
	Release(ctx context.Context, slots Slots) error
	// Adjust applies corrections to items taken earlier (reserve, then
	// settle). A refund to a key that no longer exists is skipped (its
	// state is full or empty again, which a refund cannot improve on); a
	// charge to one counts against a new state.
	Adjust(ctx context.Context, adj []Adjustment) error
	// Close releases the store's resources.
	Close() error
}

// SpecConverter is implemented by stores that know, for each key, the
// spec its state was written under, and convert the state when an item
// (or adjustment) comes with another spec of the same kind: a token
// bucket keeps its tokens (bucket.Params.Convert: no credit created,
// tokens above a smaller capacity dropped, debt kept) and refills at the
// new rate; a window or quota keeps its counts against the new limit
// (a window of another length starts anew). ConvertsSpecs reports whether
// the store does (a wrapper answers for the store it wraps). A caller
// may then decide one key under several specs (Item.Base); on other
// stores it keeps a spec with another StateTag under a key of its own.
type SpecConverter interface {
	ConvertsSpecs() bool
}

// Renewer is implemented by stores whose in-flight slots can be kept
// alive past their TTL, for calls that run longer than it: Renew moves the
// expiry of each of the slots still held to ttl from now (the store's
// clock), unless it is later already. A slot that was released or has
// expired is not revived, and that is not an error: a slot renewed too
// late is lost, as a crashed holder's is. ttl must be positive.
type Renewer interface {
	Renew(ctx context.Context, slots Slots, ttl time.Duration) error
}

// ErrCannotRenew reports a Renew on a store that does not implement
// Renewer.
var ErrCannotRenew = errors.New("store: slots cannot be renewed on this store")

// CanRenew reports whether s can renew slots: it is a Renewer and, when
// it wraps another store (it has a CanRenew method, as store/lease and
// store/failover do), the store it wraps can too.
func CanRenew(s Store) bool {
	if c, ok := s.(interface{ CanRenew() bool }); ok {
		return c.CanRenew()
	}
	_, ok := s.(Renewer)
	return ok
}

// Renew renews slots on s if s is a Renewer, else returns ErrCannotRenew.
func Renew(ctx context.Context, s Store, slots Slots, ttl time.Duration) error {
	r, ok := s.(Renewer)
	if !ok {
		return fmt.Errorf("%w (%T)", ErrCannotRenew, s)
	}
	return r.Renew(ctx, slots, ttl)
}

// KeyBorrower is implemented by stores that can decide items whose keys
// are borrowed: TakeBorrowed is Take for items whose Key strings alias
// memory the caller overwrites once the call returns. The store copies any
// key it keeps, and on return (error or not) every Item.Key is an equal
// string the caller may keep — the store's own copy where it holds the
// key, so that a decision on an existing key allocates no key string.
// limiter.Limiter uses it when its store offers it (store/memstore does).
type KeyBorrower interface {
	TakeBorrowed(ctx context.Context, items []Item) (Result, error)
}

// Stats is a snapshot of a store's size.
type Stats struct {
	Keys      int64  // keys held now
	Evictions uint64 // idle keys evicted so far
}

// StatsReporter is implemented by stores that can tell their size.
type StatsReporter interface {
	Stats() Stats
}

var (
	// ErrFull reports that a store holding its maximum number of keys
	// could not add one; the request is refused (nothing is taken).
	ErrFull = errors.New("store: key capacity reached")
	// ErrInvalidItem reports an item a store cannot take: no key, no spec,
	// duplicate key, or a cost outside 0..capacity.
	ErrInvalidItem = errors.New("store: invalid item")
	// ErrClosed reports a call on a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrUnavailable reports that the store's backend could not be reached
	// (or answered too late) and the request was refused for it
	// (fail_closed).
	ErrUnavailable = errors.New("store: unavailable")
)

// FullError is the error of a store that holds its maximum number of keys
// and refused a request needing a new one (nothing was taken). It matches
// ErrFull: errors.Is(err, ErrFull) holds for it.
type FullError struct {
	Keys int64  // keys held when the request was refused
	Cap  int64  // the most keys the store holds
	Key  string // the new key refused
	// RetryAfter is how long until the store expects room for a new key
	// (a held key becoming idle and evictable); the store's documentation
	// says how precise it is. 0 when the store cannot tell.
	RetryAfter time.Duration
}

// Error reads "store: key capacity reached: K keys held (cap C); new key
// "k" refused", followed by "; room in D" when RetryAfter is known.
func (e *FullError) Error() string {
	msg := fmt.Sprintf("%v: %d keys held (cap %d); new key %q refused", ErrFull, e.Keys, e.Cap, e.Key)
	if e.RetryAfter > 0 {
		msg += "; room in " + max(e.RetryAfter.Round(time.Millisecond), time.Millisecond).String()
	}
	return msg
}

// Unwrap returns ErrFull.
func (e *FullError) Unwrap() error { return ErrFull }

// Validate checks items as Take must: each has a key and a spec, a cost
// within 0..Spec.Capacity() (any cost >= 0 for Concurrency) and, for an
// item of a priority class, within Spec.ClassCapacity (one slot of an
// in-flight cap for a cost above 0), and keys are distinct. The error
// matches ErrInvalidItem.
func Validate(items []Item) error {
	for i, it := range items {
		switch {
		case it.Key == "" || it.Spec == nil:
			return fmt.Errorf("%w: item %d has no key or no spec", ErrInvalidItem, i)
		case it.Cost < 0:
			return fmt.Errorf("%w: %w", ErrInvalidItem, sluice.Errorf(sluice.ErrInvalidCost, "cost %d is negative", it.Cost))
		case !it.Spec.HoldsSlots() && it.Cost > it.Spec.Capacity():
			return fmt.Errorf("%w: %w", ErrInvalidItem, sluice.Errorf(sluice.ErrCostExceedsCapacity, "cost %d exceeds capacity %d", it.Cost, it.Spec.Capacity()))
		}
		if err := it.classCostError(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidItem, err)
		}
		for _, prev := range items[:i] {
			if prev.Key == it.Key {
				return fmt.Errorf("%w: key %q given twice", ErrInvalidItem, it.Key)
			}
		}
	}
	return nil
}
