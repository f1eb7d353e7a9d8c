// Book: request_id answers and receipt records on the shared store, bounded
// and following the failover store's circuit, kept in process while it is
// open.
package failover

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
)

// Book wraps a shared book.Book (redisstore.NewBook) with the failover
// store's bounds and circuit:
//
//   - every call to the shared book is bounded by the store's Timeout (the
//     wrapper stops waiting at the deadline), and one that fails or times
//     out opens the circuit as a failed decision does;
//   - while the circuit is open nothing is sent to the shared book: a
//     request_id is claimed, and a receipt recorded, in an in-process book
//     (book.Memory, bounded by the same Config), so that a retry, a settle
//     or a release reaching this instance works as usual, during the
//     outage and after it (an id claimed in process is answered there for
//     its idempotency window), while one reaching another instance does
//     not find it (its request_id decides anew; its receipt id is
//     unknown_lease);
//   - a receipt whose record could not be written to the shared book (the
//     call failed or timed out) is recorded in process instead: every receipt
//     id handed out is usable later on the instance that issued it, and on
//     every instance when the shared book took it. Receipt ids recorded in
//     process start with "local~";
//   - Slots and TakeReceipt of a receipt recorded on the shared book are not
//     sent while the circuit is open: an error matching
//     store.ErrUnavailable at once (the service answers 503 store_error).
//
// A request_id claimed on the shared book whose answer cannot be written
// there (the store failed meanwhile) stays pending there until its
// idempotency window ends; retries reaching the shared book are then
// answered "did not finish" (503 retry) until it does.
type Book struct {
	s      *Store
	shared book.Book
	local  *book.Memory
	claims sync.Map // request ids claimed locally (id + "\x00" + fp)
	kept   keptIDs  // request ids claimed locally, for their window
}

// NewBook returns shared wrapped by s's bounds and circuit; cfg bounds the
// in-process book used while s is degraded.
func NewBook(s *Store, shared book.Book, cfg book.Config) *Book {
	b := &Book{s: s, shared: shared, local: book.NewMemory(cfg, nil)}
	cfg = cfg.Defaults()
	b.kept.window, b.kept.max = cfg.IdempotencyWindow, cfg.MaxAnswers
	return b
}

// down reports whether a call to the shared book must not be sent.
func (b *Book) down() bool { return b.s.degraded.Load() }

// call runs one bounded call to the shared book and opens the circuit on
// a failure (an error that is not one of the book's answers, nor mine's:
// an error of the caller's own check); what f writes may be read only
// when done is true.
func (b *Book) call(ctx context.Context, f func(context.Context) error, late func(), mine func(error) bool) (done bool, err error) {
	done, err = b.s.boundedCall(ctx, f, late)
	if b.failed(ctx, err, done, mine) {
		b.s.degrade(err)
	}
	return done, err
}

// failed reports whether a call's error is a failure of the store.
func (b *Book) failed(ctx context.Context, err error, done bool, mine func(error) bool) bool {
	switch {
	case !outage(ctx, err):
		return false
	case !done:
		return true
	}
	return !isBookAnswer(err) && (mine == nil || !mine(err))
}

// isBookAnswer reports whether err is one of the book's own answers (not
// a failure of the store).
func isBookAnswer(err error) bool {
	for _, e := range []error{book.ErrMismatch, book.ErrUnknown, book.ErrSettled, book.ErrDropped} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Begin implements book.Book. A request id claimed in process (while the
// circuit was open) is answered there for its idempotency window, the
// circuit open or not: a retry, or envoy_settle's stream-done call, after
// the store answers again finds the answer (or the booking) made during
// the outage rather than claiming the id anew on the shared book.
//
// The shared book's Begin, which may wait for a racing first request's
// answer, is bounded by the timeout as a whole. When it has not answered
// within half the timeout, one ping of the primary is sent: if the ping
// has not answered either by the timeout, the store is taken as frozen,
// the circuit opens and the id is claimed in process at once (so that the
// call's decision after it does not wait out a second timeout); if the
// ping answered, the first request is still deciding and the request is
// told the first did not finish (nil, not owner: the service answers 503
// retry). A store that fails outright opens the circuit at once, and the
// id is claimed in process. When the caller's own deadline ends the wait
// first, the request is told the first did not finish, and a ping in the
// background opens the circuit if the store does not answer it.
func (b *Book) Begin(ctx context.Context, id, fp string) ([]byte, bool, error) {
	if !b.down() {
		if ans, owner, err, ok := b.beginKept(ctx, id, fp); ok {
			return ans, owner, err
		}
		var ans []byte
		var owner bool
		answered := b.s.pingAfter(b.s.cfg.Timeout / 2)
		done, err := b.s.boundedCall(ctx, func(ctx context.Context) error {
			var err error
			ans, owner, err = b.shared.Begin(ctx, id, fp)
			return err
		}, func() {
			if owner { // claimed after all, too late: forget it so that retries decide
				ctx, cancel := context.WithTimeout(context.Background(), b.s.cfg.Timeout)
				b.shared.Finish(ctx, id, fp, nil)
				cancel()
			}
		})
		alive := answered()
		timedOut := !done || errors.Is(err, context.DeadlineExceeded)
		switch {
		case done && !b.failed(ctx, err, done, nil):
			return ans, owner, err
		case !outage(ctx, err):
			return nil, false, err // the caller left
		case timedOut && ctx.Err() == nil && !alive:
			b.s.degrade(err) // neither the claim nor a ping answered: frozen
		case timedOut:
			b.s.suspect()
			return nil, false, nil
		default:
			b.s.degrade(err)
		}
	}
	ans, owner, err := b.local.Begin(ctx, id, fp)
	if owner {
		b.claims.Store(id+"\x00"+fp, struct{}{})
		b.kept.add(id)
	}
	return ans, owner, err
}

// beginKept is Begin on the in-process book for an id claimed there within
// its idempotency window (ok false: none, decide on the shared book).
func (b *Book) beginKept(ctx context.Context, id, fp string) (ans []byte, owner bool, err error, ok bool) {
	if !b.kept.has(id) {
		return nil, false, nil, false
	}
	ans, owner, err = b.local.Begin(ctx, id, fp)
	if owner { // the in-process book no longer holds it (its cap): undo the claim
		b.local.Finish(ctx, id, fp, nil)
		b.kept.forget(id)
		return nil, false, nil, false
	}
	return ans, owner, err, true
}

// Finish implements book.Book: on the book that holds the claim; a claim
// on the shared book is not finished while the circuit is open.
func (b *Book) Finish(ctx context.Context, id, fp string, answer []byte) {
	if _, ok := b.claims.LoadAndDelete(id + "\x00" + fp); ok {
		b.local.Finish(ctx, id, fp, answer)
		if answer == nil {
			b.kept.forget(id)
		}
		return
	}
	if b.down() {
		return
	}
	b.call(ctx, func(ctx context.Context) error { b.shared.Finish(ctx, id, fp, answer); return nil }, nil, nil)
}

// AddRecord implements book.Book: on the shared book, or in process while
// the circuit is open or when the shared book failed to take it.
func (b *Book) AddRecord(ctx context.Context, r book.Record) (string, error) {
	if !b.down() {
		var id string
		done, err := b.call(ctx, func(ctx context.Context) error {
			var err error
			id, err = b.shared.AddRecord(ctx, r)
			return err
		}, nil, nil)
		if done && (err == nil || id != "") {
			return id, nil // (an error after the record was written: only its place among receipts is missing)
		}
	}
	id, err := b.local.AddRecord(ctx, r)
	if err != nil {
		return "", err
	}
	return localPrefix + id, nil
}

// Slots implements book.Book.
func (b *Book) Slots(ctx context.Context, id string) (store.Slots, error) {
	if lid, ok := strings.CutPrefix(id, localPrefix); ok {
		return b.local.Slots(ctx, lid)
	}
	if b.down() {
		return store.Slots{}, b.s.unavailable()
	}
	var l store.Slots
	done, err := b.call(ctx, func(ctx context.Context) error {
		var err error
		l, err = b.shared.Slots(ctx, id)
		return err
	}, nil, nil)
	if !done {
		return store.Slots{}, err
	}
	return l, err
}

// TakeReceipt implements book.Book. check runs in the call bounded by the
// timeout (it is the caller's validation, quick).
func (b *Book) TakeReceipt(ctx context.Context, id string, check func([]byte) error) ([]byte, error) {
	if lid, ok := strings.CutPrefix(id, localPrefix); ok {
		return b.local.TakeReceipt(ctx, lid, check)
	}
	if b.down() {
		return nil, b.s.unavailable()
	}
	var rc []byte
	var checkErr error
	chk := check
	if check != nil {
		chk = func(raw []byte) error { checkErr = check(raw); return checkErr }
	}
	done, err := b.call(ctx, func(ctx context.Context) error {
		var err error
		rc, err = b.shared.TakeReceipt(ctx, id, chk)
		return err
	}, nil, func(err error) bool { return checkErr != nil && err == checkErr })
	if !done {
		return nil, err
	}
	return rc, err
}

// TakeReceiptSlots implements book.SlotsTaker: TakeReceipt with the
// record's slots, on the book that holds the record (book.TakeReceiptSlots
// on the shared one, bounded by the timeout as TakeReceipt is).
func (b *Book) TakeReceiptSlots(ctx context.Context, id string, check func([]byte) error) ([]byte, store.Slots, error) {
	if lid, ok := strings.CutPrefix(id, localPrefix); ok {
		return b.local.TakeReceiptSlots(ctx, lid, check)
	}
	if b.down() {
		return nil, store.Slots{}, b.s.unavailable()
	}
	var rc []byte
	var slots store.Slots
	var checkErr error
	chk := check
	if check != nil {
		chk = func(raw []byte) error { checkErr = check(raw); return checkErr }
	}
	done, err := b.call(ctx, func(ctx context.Context) error {
		var err error
		rc, slots, err = book.TakeReceiptSlots(ctx, b.shared, id, chk)
		return err
	}, nil, func(err error) bool { return checkErr != nil && err == checkErr })
	if !done {
		return nil, store.Slots{}, err
	}
	return rc, slots, err
}

// Dropped implements book.Book: receipts dropped by the shared book's cap
// and by the in-process one's.
func (b *Book) Dropped() uint64 { return b.shared.Dropped() + b.local.Dropped() }
