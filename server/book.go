package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/keyesc"
	"github.com/sluicehq/sluice/store"
)

// book keeps what must outlive one HTTP call: request_id answers (so a
// retried check is not charged twice) and lease records (in-flight slots
// and receipts, for /v1/release and /v1/settle). memBook keeps them in the
// process; redisBook in Redis, so that a retry or a settle may reach any
// instance.
type book interface {
	// begin claims id: owner true means the caller decides and must call
	// finish; else a is the first request's answer (nil if it failed or
	// did not finish in time).
	begin(ctx context.Context, id string) (a *answer, owner bool, err error)
	// finish records the owner's answer (nil: forget id, so a retry decides
	// anew).
	finish(ctx context.Context, id string, a *answer)
	// addLease stores a lease record and returns its id.
	addLease(ctx context.Context, slots store.Lease, receipt []byte) (string, error)
	// lease returns a lease record's slots.
	lease(ctx context.Context, id string) (store.Lease, bool, error)
	// takeReceipt returns a lease's receipt once: ok false for an unknown
	// or expired lease, an empty receipt when it was taken already.
	takeReceipt(ctx context.Context, id string) (receipt []byte, ok bool, err error)
}

func newLeaseID() string {
	var raw [16]byte
	rand.Read(raw[:])
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

// memBook is the in-process book.
type memBook struct {
	idem   *idempotency
	leases *leaseBook
}

func (m memBook) begin(ctx context.Context, id string) (*answer, bool, error) {
	a, owner := m.idem.begin(ctx, id)
	return a, owner, nil
}

func (m memBook) finish(_ context.Context, id string, a *answer) { m.idem.finish(id, a) }

func (m memBook) addLease(_ context.Context, slots store.Lease, receipt []byte) (string, error) {
	return m.leases.add(slots, receipt), nil
}

func (m memBook) lease(_ context.Context, id string) (store.Lease, bool, error) {
	rec, ok := m.leases.get(id)
	return rec.slots, ok, nil
}

func (m memBook) takeReceipt(_ context.Context, id string) ([]byte, bool, error) {
	rc, ok := m.leases.takeReceipt(id)
	return rc, ok, nil
}

// redisBook keeps the book in Redis: a request_id is claimed with SET NX
// (a pending marker, then the answer), a lease is a hash (slots, receipt)
// that expires after the lease window, and a receipt is taken once by a
// script (HGET and HDEL together).
type redisBook struct {
	c            rueidis.Client
	prefix       string
	idemWindow   time.Duration
	leaseWindow  time.Duration
	takeReceiptS *rueidis.Lua
}

func newRedisBook(c rueidis.Client, prefix string, idemWindow, leaseWindow time.Duration) *redisBook {
	return &redisBook{c: c, prefix: prefix, idemWindow: idemWindow, leaseWindow: leaseWindow,
		takeReceiptS: rueidis.NewLuaScript(`
local v = redis.call('HGET', KEYS[1], 'r')
if v then redis.call('HDEL', KEYS[1], 'r'); return v end
if redis.call('EXISTS', KEYS[1]) == 1 then return '' end
return false`)}
}

// pending marks a request_id whose first request is still deciding.
const pending = "pending"

type storedAnswer struct {
	Status  int         `json:"status"`
	Headers http.Header `json:"headers"`
	Body    []byte      `json:"body"`
}

func (b *redisBook) idemKey(id string) string { return b.prefix + "idem:{" + escapeTag(id) + "}" }
func (b *redisBook) leaseKey(id string) string {
	return b.prefix + "lease:{" + id + "}"
}

// escapeTag keeps a client's request_id from closing the hash tag early.
func escapeTag(s string) string { return string(keyesc.Append(nil, s, "{}")) }

func (b *redisBook) begin(ctx context.Context, id string) (*answer, bool, error) {
	key := b.idemKey(id)
	err := b.c.Do(ctx, b.c.B().Set().Key(key).Value(pending).Nx().Px(b.idemWindow).Build()).Error()
	if err == nil {
		return nil, true, nil
	}
	if !rueidis.IsRedisNil(err) {
		return nil, false, err
	}
	// Someone has it: wait for its answer (a racing retry), bounded.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := b.c.Do(ctx, b.c.B().Get().Key(key).Build()).ToString()
		switch {
		case rueidis.IsRedisNil(err):
			return nil, false, nil // it failed and was forgotten
		case err != nil:
			return nil, false, err
		case v != pending:
			var sa storedAnswer
			if err := json.Unmarshal([]byte(v), &sa); err != nil {
				return nil, false, err
			}
			return &answer{status: sa.Status, headers: sa.Headers, body: sa.Body}, false, nil
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

func (b *redisBook) finish(ctx context.Context, id string, a *answer) {
	ctx = context.WithoutCancel(ctx) // record it even if the client left
	key := b.idemKey(id)
	if a == nil {
		b.c.Do(ctx, b.c.B().Del().Key(key).Build())
		return
	}
	v, _ := json.Marshal(storedAnswer{Status: a.status, Headers: a.headers, Body: a.body})
	b.c.Do(ctx, b.c.B().Set().Key(key).Value(string(v)).Xx().Px(b.idemWindow).Build())
}

type storedSlots struct {
	ID   string   `json:"id"`
	Keys []string `json:"keys"`
}

func (b *redisBook) addLease(ctx context.Context, slots store.Lease, receipt []byte) (string, error) {
	id := newLeaseID()
	s, _ := json.Marshal(storedSlots(slots))
	key := b.leaseKey(id)
	cmd := b.c.B().Hset().Key(key).FieldValue().FieldValue("s", string(s))
	if len(receipt) > 0 {
		cmd = cmd.FieldValue("r", string(receipt))
	}
	for _, r := range b.c.DoMulti(ctx, cmd.Build(), b.c.B().Pexpire().Key(key).Milliseconds(b.leaseWindow.Milliseconds()).Build()) {
		if err := r.Error(); err != nil {
			return "", err
		}
	}
	return id, nil
}

func (b *redisBook) lease(ctx context.Context, id string) (store.Lease, bool, error) {
	v, err := b.c.Do(ctx, b.c.B().Hget().Key(b.leaseKey(id)).Field("s").Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return store.Lease{}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, err
	}
	var s storedSlots
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return store.Lease{}, false, errors.New("server: corrupt lease record")
	}
	return store.Lease(s), true, nil
}

func (b *redisBook) takeReceipt(ctx context.Context, id string) ([]byte, bool, error) {
	v, err := b.takeReceiptS.Exec(ctx, b.c, []string{b.leaseKey(id)}, nil).ToString()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return []byte(v), true, nil
}
