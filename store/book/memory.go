// Memory, the in-process Book: request_id answers, receipt records and receipts.

package book

import (
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Memory is the in-process Book. Receipt ids carry their issue time and a
// flag saying whether the record had a receipt, under a MAC keyed per
// process: a settle for a receipt that the cap dropped (and that is no
// longer held) is told ErrDropped, not ErrUnknown, without keeping a
// tombstone.
//
// Memory: a kept receipt costs its bytes (limiter.Receipt's compact
// encoding: some 80 B for two limits) plus about 100 B: a map slot keyed
// by the id's 16 bytes before its MAC (no id string is kept), a 24-byte
// place in the receipts' FIFO, and the slots only for records that hold
// some.
type Memory struct {
	cfg   Config
	clock sluice.Clock
	key   [32]byte
	t0    time.Time // receipts' times are kept as durations since t0

	amu     sync.Mutex
	answers map[string]*answerEntry
	aorder  []string // insertion order, for expiry and the cap

	lmu      sync.Mutex
	recs     map[idKey]record
	receipts []fifoEntry // records with a receipt (pending or settled), oldest first
	slots    slotHeap    // records holding slots, by expiry
	dropped  atomic.Uint64
}

// idKey is a receipt id's raw bytes before its MAC: issue time, flags and
// random bytes (the MAC is checked before a lookup).
type idKey [idMAC]byte

type answerEntry struct {
	fp   string
	ans  []byte
	at   time.Time
	done chan struct{}
}

// record is a receipt record, kept by value in Memory.recs.
type record struct {
	receipt string      // the receipt while pending
	slots   *slotRecord // nil: no live slots
	state   receiptState
}

// slotRecord is a record's live slots and their expiry.
type slotRecord struct {
	held  store.Slots
	until time.Time
}

type receiptState uint8

const (
	noReceipt receiptState = iota // never had one
	pending                       // kept for settle
	settled                       // taken
	dropped                       // dropped by the cap
	expired                       // past the receipt window
)

type fifoEntry struct {
	id idKey
	at time.Duration // since Memory.t0
}

// NewMemory returns an in-process Book bounded by cfg (zero fields: the
// defaults); clock nil is the system clock.
func NewMemory(cfg Config, clock sluice.Clock) *Memory {
	if clock == nil {
		clock = sluice.SystemClock{}
	}
	m := &Memory{cfg: cfg.Defaults(), clock: clock, answers: map[string]*answerEntry{}, recs: map[idKey]record{}}
	m.t0 = clock.Now()
	rand.Read(m.key[:])
	return m
}

// Begin implements Book.
func (m *Memory) Begin(ctx context.Context, id, fp string) ([]byte, bool, error) {
	m.amu.Lock()
	now := m.clock.Now()
	m.expireAnswersLocked(now)
	e, ok := m.answers[id]
	if !ok {
		m.answers[id] = &answerEntry{fp: fp, at: now, done: make(chan struct{})}
		m.aorder = append(m.aorder, id)
		m.amu.Unlock()
		return nil, true, nil
	}
	m.amu.Unlock()
	if e.fp != fp {
		return nil, false, ErrMismatch
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, false, nil
	}
	return e.ans, false, nil
}

func (m *Memory) expireAnswersLocked(now time.Time) {
	for len(m.aorder) > 0 {
		id := m.aorder[0]
		e, ok := m.answers[id]
		if ok && (now.Sub(e.at) < m.cfg.IdempotencyWindow && len(m.answers) <= m.cfg.MaxAnswers || e.ans == nil && !isClosed(e.done)) {
			return
		}
		delete(m.answers, id)
		m.aorder = m.aorder[1:]
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Finish implements Book.
func (m *Memory) Finish(_ context.Context, id, _ string, ans []byte) {
	m.amu.Lock()
	defer m.amu.Unlock()
	e := m.answers[id]
	if e == nil || isClosed(e.done) {
		return
	}
	if ans == nil {
		delete(m.answers, id)
	} else {
		e.ans, e.at = ans, m.clock.Now()
	}
	close(e.done)
}

// Receipt ids: 6 bytes of issue time (Unix ms), 1 byte of flags, 9 random
// bytes, 8 bytes of HMAC-SHA256 over the rest.
const (
	idRaw       = 24
	idMAC       = 16 // where the MAC starts
	idLen       = 32 // base64 characters
	flagReceipt = 1
)

func (m *Memory) newID(now time.Time, flags byte) (string, idKey) {
	var raw [idRaw]byte
	ms := uint64(now.UnixMilli())
	binary.BigEndian.PutUint16(raw[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(raw[2:6], uint32(ms))
	raw[6] = flags
	rand.Read(raw[7:idMAC])
	copy(raw[idMAC:], m.mac(raw[:idMAC]))
	return base64.RawURLEncoding.EncodeToString(raw[:]), idKey(raw[:idMAC])
}

func (m *Memory) mac(b []byte) []byte {
	h := hmac.New(sha256.New, m.key[:])
	h.Write(b)
	return h.Sum(nil)[:8]
}

// issued reports whether id is one this Book issued, with its issue time,
// flags and key.
func (m *Memory) issued(id string) (time.Time, byte, idKey, bool) {
	if len(id) != idLen { // (the decoder would skip newlines)
		return time.Time{}, 0, idKey{}, false
	}
	var raw [idRaw]byte
	n, err := base64.RawURLEncoding.Decode(raw[:], []byte(id))
	if err != nil || n != idRaw || !hmac.Equal(raw[idMAC:], m.mac(raw[:idMAC])) {
		return time.Time{}, 0, idKey{}, false
	}
	ms := uint64(binary.BigEndian.Uint16(raw[0:2]))<<32 | uint64(binary.BigEndian.Uint32(raw[2:6]))
	return time.UnixMilli(int64(ms)), raw[6], idKey(raw[:idMAC]), true
}

// AddRecord implements Book.
func (m *Memory) AddRecord(_ context.Context, r Record) (string, error) {
	now := m.clock.Now()
	var flags byte
	if len(r.Receipt) > 0 {
		flags |= flagReceipt
	}
	id, k := m.newID(now, flags)
	var rec record
	m.lmu.Lock()
	defer m.lmu.Unlock()
	m.expireLocked(now)
	if r.Slots.ID != "" {
		rec.slots = &slotRecord{held: r.Slots, until: now.Add(r.SlotsTTL)}
		heap.Push(&m.slots, slotEntry{id: k, until: rec.slots.until})
	}
	if len(r.Receipt) > 0 {
		rec.receipt, rec.state = string(r.Receipt), pending
		m.receipts = append(m.receipts, fifoEntry{id: k, at: now.Sub(m.t0)})
	}
	m.recs[k] = rec
	for len(m.receipts) > m.cfg.MaxReceipts {
		m.popReceiptLocked(dropped)
	}
	return id, nil
}

// expireLocked ends receipts past the receipt window and slots past their
// expiry, deleting records that hold neither.
func (m *Memory) expireLocked(now time.Time) {
	for len(m.receipts) > 0 && now.Sub(m.t0)-m.receipts[0].at >= m.cfg.ReceiptWindow {
		m.popReceiptLocked(expired)
	}
	for m.slots.Len() > 0 && !m.slots[0].until.After(now) {
		e := heap.Pop(&m.slots).(slotEntry)
		if rec, ok := m.recs[e.id]; ok {
			rec.slots = nil
			m.putLocked(e.id, rec)
		}
	}
}

// popReceiptLocked ends the oldest receipt: dropped (by the cap) or
// expired.
func (m *Memory) popReceiptLocked(why receiptState) {
	id := m.receipts[0].id
	m.receipts = m.receipts[1:]
	rec, ok := m.recs[id]
	if !ok {
		return
	}
	if rec.state == pending {
		rec.receipt, rec.state = "", why
		if why == dropped {
			m.dropped.Add(1)
		}
	} else if rec.state == settled {
		rec.state = expired
	}
	m.putLocked(id, rec)
}

// putLocked stores rec under id, or deletes it when it holds neither
// slots nor a receipt (pending or settled).
func (m *Memory) putLocked(id idKey, rec record) {
	if rec.slots == nil && rec.state != pending && rec.state != settled {
		delete(m.recs, id)
		return
	}
	m.recs[id] = rec
}

// lookupLocked is the record of id (an id this Book issued).
func (m *Memory) lookupLocked(id string) (idKey, record, bool) {
	_, _, k, ok := m.issued(id)
	if !ok {
		return idKey{}, record{}, false
	}
	rec, ok := m.recs[k]
	return k, rec, ok
}

// Slots implements Book.
func (m *Memory) Slots(_ context.Context, id string) (store.Slots, error) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	m.expireLocked(m.clock.Now())
	return m.slotsLocked(id)
}

// TakeReceiptSlots implements SlotsTaker: TakeReceipt and Slots under one
// lock.
func (m *Memory) TakeReceiptSlots(_ context.Context, id string, check func([]byte) error) ([]byte, store.Slots, error) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	now := m.clock.Now()
	m.expireLocked(now)
	slots, _ := m.slotsLocked(id)
	rc, err := m.takeReceiptLocked(id, check, now)
	return rc, slots, err
}

func (m *Memory) slotsLocked(id string) (store.Slots, error) {
	_, rec, ok := m.lookupLocked(id)
	if !ok || rec.slots == nil && rec.state != pending && rec.state != settled {
		return store.Slots{}, ErrUnknown
	}
	if rec.slots == nil {
		return store.Slots{}, nil
	}
	return rec.slots.held, nil
}

// TakeReceipt implements Book.
func (m *Memory) TakeReceipt(_ context.Context, id string, check func([]byte) error) ([]byte, error) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	now := m.clock.Now()
	m.expireLocked(now)
	return m.takeReceiptLocked(id, check, now)
}

func (m *Memory) takeReceiptLocked(id string, check func([]byte) error, now time.Time) ([]byte, error) {
	if k, rec, ok := m.lookupLocked(id); ok {
		switch rec.state {
		case pending:
			rc := []byte(rec.receipt)
			if check != nil {
				if err := check(rc); err != nil {
					return nil, err
				}
			}
			rec.receipt, rec.state = "", settled
			m.putLocked(k, rec)
			return rc, nil
		case dropped:
			return nil, ErrDropped
		case expired:
			return nil, ErrUnknown
		}
		return nil, ErrSettled
	}
	at, flags, _, ok := m.issued(id)
	if ok && flags&flagReceipt != 0 && now.Sub(at) < m.cfg.ReceiptWindow {
		// Issued here with a receipt, within its window, and gone: the cap
		// dropped it (or dropped its settled record).
		return nil, ErrDropped
	}
	return nil, ErrUnknown
}

// Dropped implements Book.
func (m *Memory) Dropped() uint64 { return m.dropped.Load() }

type slotEntry struct {
	id    idKey
	until time.Time
}

type slotHeap []slotEntry

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h slotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(slotEntry)) }
func (h *slotHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
