// Book in Redis: request_id answers and receipt records, shared by every instance on the store.

package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
)

// Book keeps request_id answers and receipt records in Redis (keys under
// the store's prefix), so that a retried check, a settle or a release may
// reach any instance sharing the store:
//
//   - a request_id is claimed with SET NX (a pending marker with the
//     request's fingerprint, then the answer), kept for the idempotency
//     window;
//   - a receipt record is a hash (slots, receipt) that expires after the receipt
//     window or its slots' TTL, whichever is later;
//   - receipts are bounded: a sorted set (one key, scored by Redis time)
//     orders them; past the receipt window they leave it, and beyond
//     MaxReceipts the oldest are dropped (their hash keeps a marker, so a
//     settle is told book.ErrDropped) and counted.
type Book struct {
	s      *Store // counts and classifies the errors of its calls
	c      rueidis.Client
	prefix string
	cfg    book.Config
	drops  atomic.Uint64
	adds   addQueue // a single Redis's records waiting for a script call
}

// NewBook returns a Book on s's Redis, bounded by cfg (zero fields: the
// defaults; MaxAnswers does not apply: answers expire by their window).
func NewBook(s *Store, cfg book.Config) *Book {
	return &Book{s: s, c: s.c, prefix: s.cfg.prefix, cfg: cfg.Defaults()}
}

var (
	// takeReceipt takes the receipt once, unless it is past the receipt
	// window (ARGV[1] now ms, ARGV[2] window ms: a record can outlive its
	// receipt's window to hold its slots); with ARGV[3] '0' it only reads
	// it, and with ARGV[4] set it takes it only if it still equals ARGV[4]
	// (read, checked, then taken: a concurrent taker wins once). The
	// reply's last element is the record's slots ('' for none).
	takeReceiptScript = rueidis.NewLuaScript(`
local s = redis.call('HGET', KEYS[1], 's') or ''
local v = redis.call('HGET', KEYS[1], 'r')
if v then
  local t = tonumber(redis.call('HGET', KEYS[1], 't') or '0')
  if tonumber(ARGV[1]) - t >= tonumber(ARGV[2]) then return {'u', s} end
  if ARGV[4] ~= '' and v ~= ARGV[4] then return {'s', s} end
  if ARGV[3] == '1' then redis.call('HDEL', KEYS[1], 'r') end
  return {'r', v, s}
end
if redis.call('HEXISTS', KEYS[1], 'd') == 1 then return {'d', s} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'s', s} end
return {'u', s}`)
	// receipts orders receipts by arrival (Redis time in microseconds,
	// made strictly increasing): it drops those past the window (ARGV[2]
	// ms) and, beyond ARGV[3], pops and returns the oldest.
	receiptsScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local score = now
if top[2] and tonumber(top[2]) >= score then score = tonumber(top[2]) + 1 end
redis.call('ZADD', KEYS[1], score, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]) * 1000)
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if over > 0 then return redis.call('ZPOPMIN', KEYS[1], over) end
return {}`)
	dropScript = rueidis.NewLuaScript(`
if redis.call('HEXISTS', KEYS[1], 'r') == 1 then
  redis.call('HDEL', KEYS[1], 'r'); redis.call('HSET', KEYS[1], 'd', '1'); return 1
end
return 0`)
)

// pending marks a request_id whose first request is still deciding; the
// fingerprint follows it, and after "a:" the fingerprint and the answer.
const (
	pendingTag = "p:"
	answerTag  = "a:"
)

func (b *Book) idemKey(id string) string {
	return b.prefix + "idem:{" + string(tagEsc.Append(nil, id)) + "}"
}
func (b *Book) recordKey(id string) string { return b.prefix + "lease:{" + id + "}" }
func (b *Book) receiptsKey() string        { return b.prefix + "receipts" }

// Begin implements book.Book.
func (b *Book) Begin(ctx context.Context, id, fp string) ([]byte, bool, error) {
	key := b.idemKey(id)
	err := b.c.Do(ctx, b.c.B().Set().Key(key).Value(pendingTag+fp).Nx().Px(b.cfg.IdempotencyWindow).Build()).Error()
	if err == nil {
		return nil, true, nil
	}
	if !rueidis.IsRedisNil(err) {
		return nil, false, b.s.fail("book", err)
	}
	// Someone has it: wait for its answer (a racing retry), bounded.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := b.c.Do(ctx, b.c.B().Get().Key(key).Build()).ToString()
		switch {
		case rueidis.IsRedisNil(err):
			return nil, false, nil // it failed and was forgotten
		case err != nil:
			return nil, false, b.s.fail("book", err)
		case len(v) >= len(answerTag)+len(fp)+1 && v[:len(answerTag)] == answerTag:
			if v[len(answerTag):len(answerTag)+len(fp)] != fp {
				return nil, false, book.ErrMismatch
			}
			return []byte(v[len(answerTag)+len(fp)+1:]), false, nil
		case v != pendingTag+fp:
			return nil, false, book.ErrMismatch
		}
		if time.Now().After(deadline) {
			return nil, false, nil
		}
		select {
		case <-ctx.Done():
			return nil, false, nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Finish implements book.Book.
func (b *Book) Finish(ctx context.Context, id, fp string, ans []byte) {
	ctx = context.WithoutCancel(ctx) // record it even if the client left
	key := b.idemKey(id)
	if ans == nil {
		b.c.Do(ctx, b.c.B().Del().Key(key).Build())
		return
	}
	b.c.Do(ctx, b.c.B().Set().Key(key).Value(answerTag+fp+":"+string(ans)).Xx().Px(b.cfg.IdempotencyWindow).Build())
}

type storedSlots struct {
	ID   string   `json:"id"`
	Keys []string `json:"keys"`
}

func newID() string {
	var raw [16]byte
	rand.Read(raw[:])
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

// AddRecord implements book.Book: the record's hash, its expiry and, with a
// receipt, its place among the receipts. On a single Redis they are one
// script call, shared by the records added at the same time (addSingle);
// on a cluster, where the record and the receipts are in different hash
// slots, a pipeline writes the record, then a script call orders it.
func (b *Book) AddRecord(ctx context.Context, r book.Record) (string, error) {
	id := newID()
	s, _ := json.Marshal(storedSlots(r.Slots))
	ttl := max(b.cfg.ReceiptWindow, r.SlotsTTL)
	if !b.s.cluster {
		c := &addCall{key: b.recordKey(id), slots: string(s), ttl: itoa(ttl.Milliseconds()), id: id}
		if len(r.Receipt) > 0 {
			c.receipt, c.at = string(r.Receipt), nowMS()
		}
		if err := b.addSingle(ctx, c); err != nil {
			return "", err
		}
		return id, nil
	}
	ctx, cancel := b.s.ctx(ctx)
	defer cancel()
	key := b.recordKey(id)
	cmd := b.c.B().Hset().Key(key).FieldValue().FieldValue("s", string(s)) // 's' always: the hash outlives its receipt
	if len(r.Receipt) > 0 {
		cmd = cmd.FieldValue("r", string(r.Receipt)).FieldValue("t", nowMS())
	}
	cmds := rueidis.Commands{cmd.Build(), b.c.B().Pexpire().Key(key).Milliseconds(ttl.Milliseconds()).Build()}
	res := b.c.DoMulti(ctx, cmds...)
	for _, x := range res {
		if err := x.Error(); err != nil {
			return "", b.s.fail("book", err)
		}
	}
	if len(r.Receipt) > 0 {
		popped, err := receiptsScript.Exec(ctx, b.c, []string{b.receiptsKey()},
			[]string{id, strconv.FormatInt(b.cfg.ReceiptWindow.Milliseconds(), 10), strconv.Itoa(b.cfg.MaxReceipts)}).ToArray()
		if err != nil {
			return id, b.s.fail("book", err) // the record is written; only its place among receipts is not
		}
		b.drop(ctx, popped)
	}
	return id, nil
}

// Slots implements book.Book.
func (b *Book) Slots(ctx context.Context, id string) (store.Slots, error) {
	v, err := b.c.Do(ctx, b.c.B().Hget().Key(b.recordKey(id)).Field("s").Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return store.Slots{}, book.ErrUnknown
	}
	if err != nil {
		return store.Slots{}, b.s.fail("book", err)
	}
	var s storedSlots
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return store.Slots{}, errors.New("redisstore: corrupt receipt record")
	}
	return store.Slots(s), nil
}

// TakeReceipt implements book.Book: with check, the receipt is read,
// checked, then taken if it is still there.
func (b *Book) TakeReceipt(ctx context.Context, id string, check func([]byte) error) ([]byte, error) {
	rc, _, err := b.TakeReceiptSlots(ctx, id, check)
	return rc, err
}

// TakeReceiptSlots implements book.SlotsTaker: TakeReceipt's calls (one
// without check; with check a read, then the take) answer the record's
// slots too, with the receipt or with its errors.
func (b *Book) TakeReceiptSlots(ctx context.Context, id string, check func([]byte) error) ([]byte, store.Slots, error) {
	if check == nil {
		return b.takeReceipt(ctx, id, true, "")
	}
	rc, slots, err := b.takeReceipt(ctx, id, false, "")
	if err != nil {
		return nil, slots, err
	}
	if err := check(rc); err != nil {
		return nil, slots, err
	}
	rc, _, err = b.takeReceipt(ctx, id, true, string(rc))
	return rc, slots, err
}

func (b *Book) takeReceipt(ctx context.Context, id string, take bool, want string) ([]byte, store.Slots, error) {
	takeArg := "0"
	if take {
		takeArg = "1"
	}
	v, err := takeReceiptScript.Exec(ctx, b.c, []string{b.recordKey(id)},
		[]string{strconv.FormatInt(time.Now().UnixMilli(), 10), strconv.FormatInt(b.cfg.ReceiptWindow.Milliseconds(), 10), takeArg, want}).ToArray()
	if err != nil {
		return nil, store.Slots{}, b.s.fail("book", err)
	}
	if len(v) < 2 {
		return nil, store.Slots{}, errors.New("redisstore: book: short reply")
	}
	var slots store.Slots
	if raw, _ := v[len(v)-1].ToString(); raw != "" {
		var st storedSlots
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, store.Slots{}, errors.New("redisstore: corrupt receipt record")
		}
		slots = store.Slots(st)
	}
	tag, _ := v[0].ToString()
	switch tag {
	case "r":
		rc, err := v[1].ToString()
		return []byte(rc), slots, err
	case "d":
		return nil, slots, book.ErrDropped
	case "s":
		return nil, slots, book.ErrSettled
	}
	return nil, slots, book.ErrUnknown
}

// Dropped implements book.Book: receipts this instance dropped.
func (b *Book) Dropped() uint64 { return b.drops.Load() }

// tagEsc keeps a client's request_id from closing the key's hash tag.
var tagEsc = keyesc.NewSet("{}")
