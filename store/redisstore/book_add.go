// Book's receipt records on a single Redis: one script call writes a batch of records and their place among the receipts.

package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// addRecordsScript writes records and orders their receipts in one call
// (a single Redis: the records and the receipts' sorted set are in no
// hash slot of their own). KEYS[1] is the receipts' sorted set, KEYS[1+i]
// record i's hash; ARGV[1] the receipt window (ms), ARGV[2] MaxReceipts,
// then five per record: its slots, its expiry (ms), its receipt (empty for
// none), the receipt's time (ms) and its id. Each hash and its expiry are
// as the cluster's pipeline writes them; the receipts are ordered as
// receiptsScript orders them (by Redis time in microseconds, made strictly
// increasing, in the batch's order), once for the batch: those past the
// window leave, and beyond MaxReceipts the oldest are popped and returned
// (member, score) for the caller to drop.
var addRecordsScript = rueidis.NewLuaScript(`
local ids = {}
for i = 2, #KEYS do
  local a = 3 + (i - 2) * 5
  if ARGV[a + 2] == '' then
    redis.call('HSET', KEYS[i], 's', ARGV[a])
  else
    redis.call('HSET', KEYS[i], 's', ARGV[a], 'r', ARGV[a + 2], 't', ARGV[a + 3])
    ids[#ids + 1] = ARGV[a + 4]
  end
  redis.call('PEXPIRE', KEYS[i], ARGV[a + 1])
end
if #ids == 0 then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local score = now
if top[2] and tonumber(top[2]) >= score then score = tonumber(top[2]) + 1 end
local add = {}
for j, id in ipairs(ids) do
  add[2 * j - 1] = score + j - 1
  add[2 * j] = id
end
redis.call('ZADD', KEYS[1], unpack(add))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]) * 1000)
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if over > 0 then return redis.call('ZPOPMIN', KEYS[1], over) end
return {}`)

// addCall is one AddRecord on a single Redis, alone or in a batch.
type addCall struct {
	key, slots, ttl, receipt, at, id string
	err                              error
	queued                           bool          // written by another caller's batch: signal done
	done                             chan struct{} // buffered: one signal
}

// Batching of AddRecord on a single Redis: at most addsInFlight script
// calls are in flight; a record added while they are all busy queues, and
// the next call to finish sends the queue (up to maxAddBatch records) as
// one script call. A lone caller is never delayed; many share round trips
// and the receipts' ordering (one TIME, ZRANGE, ZADD, ZREMRANGEBYSCORE and
// ZCARD a batch).
const (
	addsInFlight = 2
	maxAddBatch  = 64
)

type addQueue struct {
	mu       sync.Mutex
	inflight int
	queue    []*addCall
}

// addSingle writes c on a single Redis: at once when a call is free, else
// in the next batch. Waiting for a batch is bounded by the store's timeout
// (then the record is not written, and the error is the timeout's); a
// batch that has it is waited for (itself bounded by the store's timeout).
func (b *Book) addSingle(ctx context.Context, c *addCall) error {
	q := &b.adds
	q.mu.Lock()
	if q.inflight < addsInFlight {
		q.inflight++
		q.mu.Unlock()
		b.runAdds(ctx, []*addCall{c})
		b.nextAdds()
		return c.err
	}
	c.queued, c.done = true, make(chan struct{}, 1)
	q.queue = append(q.queue, c)
	q.mu.Unlock()
	wctx, cancel := b.s.ctx(ctx)
	defer cancel()
	select {
	case <-c.done:
	case <-wctx.Done():
		if b.unqueueAdd(c) {
			return b.s.fail("book", wctx.Err())
		}
		<-c.done
	}
	return c.err
}

func (b *Book) unqueueAdd(c *addCall) bool {
	q := &b.adds
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.queue {
		if x == c {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return true
		}
	}
	return false
}

// nextAdds hands the freed call to the queued records: one goroutine sends
// batch after batch while records keep queueing, then frees the call.
func (b *Book) nextAdds() {
	if batch := b.dequeueAdds(); batch != nil {
		go func() {
			for ; batch != nil; batch = b.dequeueAdds() {
				b.runAdds(context.Background(), batch)
			}
		}()
	}
}

// dequeueAdds takes the next batch, or frees the caller's call and returns
// nil when the queue is empty.
func (b *Book) dequeueAdds() []*addCall {
	q := &b.adds
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.inflight--
		return nil
	}
	n := min(len(q.queue), maxAddBatch)
	batch := make([]*addCall, n)
	copy(batch, q.queue)
	q.queue = append(q.queue[:0], q.queue[n:]...)
	return batch
}

// runAdds writes a batch in one script call (bounded by the store's
// timeout), drops the receipts it popped beyond the cap, then sets every
// call's error and signals the queued ones.
func (b *Book) runAdds(ctx context.Context, batch []*addCall) {
	ctx, cancel := b.s.ctx(ctx)
	defer cancel()
	keys := make([]string, 0, 1+len(batch))
	args := make([]string, 0, 2+5*len(batch))
	keys = append(keys, b.receiptsKey())
	args = append(args, itoa(b.cfg.ReceiptWindow.Milliseconds()), itoa(int64(b.cfg.MaxReceipts)))
	for _, c := range batch {
		keys = append(keys, c.key)
		args = append(args, c.slots, c.ttl, c.receipt, c.at, c.id)
	}
	popped, err := addRecordsScript.Exec(ctx, b.c, keys, args).ToArray()
	if err != nil {
		err = b.s.fail("book", err)
	} else {
		b.drop(ctx, popped)
	}
	for _, c := range batch {
		c.err = err
		if c.queued {
			c.done <- struct{}{}
		}
	}
}

// drop marks the receipts ZPOPMIN popped (member, score) dropped and counts
// those it did (a receipt taken or expired meanwhile is not a drop).
func (b *Book) drop(ctx context.Context, popped []rueidis.RedisMessage) {
	for i := 0; i+1 < len(popped); i += 2 {
		old, err := popped[i].ToString()
		if err != nil {
			continue
		}
		if n, err := dropScript.Exec(ctx, b.c, []string{b.recordKey(old)}, nil).AsInt64(); err == nil && n == 1 {
			b.drops.Add(1)
		}
	}
}

// nowMS is the receipt's time as takeReceipt compares it (ms).
func nowMS() string { return itoa(time.Now().UnixMilli()) }
