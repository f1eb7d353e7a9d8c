// Package redisstore is a store.Store on Redis or Redis Cluster, for many
// sluice instances sharing one budget. Plain Redis or Valkey: no module, no
// native GCRA command.
//
// Every decision is made by one Lua script (sent with EVALSHA, falling
// back to EVAL) that reads the time from Redis TIME, brings every item's
// state to that time, decides all-or-nothing, and writes the new states,
// so instances with skewed clocks agree and reset and retry come from the
// same clock. Concurrent decisions share script calls: at most two are in
// flight, and requests that arrive meanwhile go together in the next (each
// still all-or-nothing on its own); a lone caller is never delayed. A
// booking's wait is counted from as late as the store can tell, never
// later than its answer's arrival: the time the answer waited for its
// caller to pick it up is taken off, and so is the script's own run time
// where Redis lets a script see it — before 7.2: from Redis 7.2 on, and in
// Valkey, TIME is frozen for a script's whole run, so waits there count
// from the script's start and are late by its run time (a script call
// carries at most 8 bookings, about 0.25 ms), never early.
//
// The script applies the same transitions as the in-process store
// (bucket.Params, store.BucketState, window.Limit) on exact integers, so
// the same trace gives the same decisions as store/memstore. Redis Lua
// numbers are doubles, exact only below 2^53, and nanosecond times or
// fixed-point bucket states do not fit: token buckets are computed in
// doubles when every intermediate is provably below 2^53 (checked at each
// step; time as two 32-bit halves), and otherwise, like windows, on limbs
// of 24 bits (products below 2^48). A bucket's state is rebased to the
// time of each write (exactly), which keeps elapsed times short. A Redis
// TIME earlier than a key's last write counts as that write's time.
//
// Keys expire when their state equals a new key's: a token bucket about a
// second after it is full again (so that most writes keep the TTL), a
// window when its counts have aged out, an in-flight set with its last
// slot. In-flight limits are a sorted set of slot ids per key, scored by
// expiry (Unix microseconds): a crashed holder's slot comes back after the
// slot TTL.
//
// All-or-nothing across keys: on a single Redis, and on a cluster when
// every key of a request is in one hash slot, one script decides them all.
// Keys with a hash tag — a "{...}" at the start of the item key, which the
// policy's hash_tag field produces — share a slot with every key of the
// same tag. On a cluster, a request whose keys span slots is reserved slot
// by slot (in parallel) and, if any slot refuses, the reservations that
// succeeded are refunded exactly; see Take for the precision boundary.
//
// A failed call's error is an *Error with a class (Classify): unreachable
// (no answer), or Redis answering and refusing — oom, readonly, noscript,
// wrongtype, other — which Error.Refused reports, and which store/failover
// does not take for an outage. At maxmemory under noeviction a call is
// repeated through an allow-oom entry point of the function library: a
// request on existing keys is decided as usual, one that would create a
// key is refused (an *Error matching store.ErrFull) and takes nothing.
// ErrorCounts counts failed calls by class; Ping probes a decision. Open
// stops (ErrConfig) when Redis refuses the connection's settings.
package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

var (
	//go:embed lib.lua
	libLua string
	//go:embed model.lua
	modelLua string
	//go:embed fast.lua
	fastLua string
	//go:embed take.lua
	takeLua string
	//go:embed kinds.lua
	kindsLua string
	//go:embed limbpath.lua
	limbpathLua string
	//go:embed adjust.lua
	adjustLua string
	//go:embed fairshare.lua
	fairshareLua string
)

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	c       rueidis.Client
	own     bool
	cluster bool
	cfg     config
	scripts *scripts
	params  sync.Map // *store.Spec -> []string
	closed  chan struct{}
	once    sync.Once

	mu       sync.Mutex // batching
	inflight int
	queue    []*call
	fast     atomic.Uint64
	decided  atomic.Uint64
	errs     errStats
}

// Open connects to the Redis at rawURL: redis://[user:password@]host:port[/db],
// rediss:// (TLS), or redis+cluster://host1:port,host2:port,... (and
// rediss+cluster://) for a Redis Cluster. rueidis' URL query options
// (dial_timeout, write_timeout, skip_verify...) are accepted. A single
// Redis that does not answer yet is not an error (calls fail until it
// does); a cluster none of whose nodes answers is. A Redis that answers
// and refuses the connection's settings — a database number it does not
// have, a password or user it does not accept, a peer that does not speak
// RESP or fails TLS verification — is an error matching ErrConfig.
func Open(rawURL string, opts ...Option) (*Store, error) {
	opt, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg := newConfig(opts)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.pool > 0 {
		opt.BlockingPoolSize = cfg.pool
	}
	c, err := rueidis.NewClient(opt)
	if configError(err) {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("%w: connecting to %s: %w", ErrConfig, Redact(rawURL), err)
	}
	if err != nil && (c == nil || !opt.ForceSingleClient) {
		return nil, fmt.Errorf("redisstore: connecting to %s: %w", Redact(rawURL), err)
	}
	// A single Redis that does not answer yet still gives a client: it
	// connects when Redis answers, and calls fail meanwhile.
	s, err := New(c, opts...)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// New returns a store on client c (which the caller keeps and closes).
func New(c rueidis.Client, opts ...Option) (*Store, error) {
	cfg := newConfig(opts)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Store{c: c, cfg: cfg, closed: make(chan struct{}),
		cluster: c.Mode() == rueidis.ClientModeCluster,
	}
	s.scripts = newScripts(c)
	return s, nil
}

// Client returns the store's Redis client.
func (s *Store) Client() rueidis.Client { return s.c }

// Ping checks, within the store's timeout, that Redis answers and would
// decide: PING, then a decision call deciding nothing (the entry point
// every decision takes: it loads the function library where it is
// missing, and Redis refuses it as it would a decision — OOM at maxmemory,
// READONLY on a replica). Its error is an *Error (Refused when Redis
// answered but refuses); when both pass, the last WRONGTYPE a call got in
// the last 10 s, if any (that refusal is a key's, which no probe sees).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	for _, r := range s.c.DoMulti(ctx, s.c.B().Ping().Build()) {
		if err := r.Error(); err != nil {
			return s.fail("ping", err)
		}
	}
	// take with no spec and no request: {0, now}, and nothing written.
	if err := s.scripts.take1(ctx, nil, []string{s.now(), s.expire(), "0", "0"}).Error(); err != nil {
		return s.fail("ping", err)
	}
	return s.recentKeyRefusal()
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.timeout)
}

// Key returns the Redis key of an item key under spec kind k: the prefix,
// the item's hash tag if it starts with one, a kind letter, and the key.
func (s *Store) Key(k store.Kind, key string) string {
	return s.cfg.prefix + string(kindLetter(k)) + ":" + key
}

// Take implements store.Store. On a single Redis (or one hash slot) the
// decision is one atomic script. On a cluster, items in different hash
// slots are taken hash slot by hash slot, all at once; when any refuses,
// what the others took is refunded exactly (store.Adjust semantics) and
// their in-flight slots released. Precision boundary: between the take and its
// refund (one round trip) other requests see those tokens taken, so they
// may be refused when they would have been admitted (never admitted when
// they should have been refused).
func (s *Store) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	select {
	case <-s.closed:
		return store.Result{}, store.ErrClosed
	default:
	}
	if err := store.Validate(items); err != nil {
		return store.Result{}, err
	}
	if len(items) == 0 {
		return store.Result{Allowed: true}, nil
	}
	slotID := ""
	for _, it := range items {
		if it.Spec.HoldsSlots() && it.Cost > 0 {
			slotID = newSlotID()
			break
		}
	}
	res := store.Result{Allowed: true}
	var groups [][]int
	if s.cluster && len(items) > 1 {
		groups = s.groups(items)
	}
	if len(groups) > 1 {
		ok, err := s.takeHashSlots(ctx, items, groups, slotID)
		if err != nil {
			return store.Result{}, err
		}
		res.Allowed = ok
	} else {
		c := callPool.Get().(*call)
		c.items, c.slotID, c.ok, c.err, c.queued = items, slotID, false, nil, false
		c.self[0] = c
		if s.cluster {
			s.run(ctx, c.self[:])
		} else if !s.submit(ctx, c) {
			select {
			case <-c.done:
			case <-ctx.Done():
				if s.unqueue(c) {
					// Not sent yet: it takes nothing.
					c.items, c.self[0] = nil, nil
					return store.Result{}, s.fail("take", ctx.Err())
				}
				// Already in a script call: its decision stands (tokens
				// taken are the caller's), so wait for it (bounded by the
				// store's timeout) rather than report a failure for a
				// request that was admitted.
				<-c.done
			}
		}
		var err error
		res.Allowed, err = c.ok, c.err
		if res.Allowed {
			s.countFromAnswer(items, c)
		}
		c.items, c.err, c.self[0] = nil, nil, nil
		callPool.Put(c)
		if err != nil {
			return store.Result{}, err
		}
	}
	if !res.Allowed {
		for i := range items {
			items[i].RefundBefore, items[i].Wait = 0, 0
		}
		return res, nil
	}
	for _, it := range items {
		res.Wait = max(res.Wait, it.Wait)
		if it.Spec.HoldsSlots() && it.Cost > 0 {
			res.Slots.ID = slotID
			res.Slots.Keys = append(res.Slots.Keys, s.Key(it.Spec.Kind, it.Key))
		}
	}
	return res, nil
}

// ScriptStats counts the items decided and how many of them took the
// script's double path (the rest took the exact limb path).
type ScriptStats struct {
	Items, Fast uint64
}

// ScriptStats returns the counts so far.
func (s *Store) ScriptStats() ScriptStats {
	return ScriptStats{Items: s.decided.Load(), Fast: s.fast.Load()}
}

// Adjust implements store.Store: one script per hash slot.
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	return s.adjustRelease(ctx, adj, store.Slots{})
}

// AdjustRelease implements store.AdjustReleaser: the adjustments and the
// release of the slots in one script call per hash slot (one on a single
// Redis, or when every key shares a hash tag, as a shared gate's do),
// bounded by the store's timeout; with no adjustment to apply, Release.
func (s *Store) AdjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	return s.adjustRelease(ctx, adj, slots)
}

func (s *Store) adjustRelease(ctx context.Context, adj []store.Adjustment, slots store.Slots) error {
	select {
	case <-s.closed:
		return store.ErrClosed
	default:
	}
	release := slots.ID != "" && len(slots.Keys) > 0
	if release {
		if err := s.ownKeys("release", slots.Keys); err != nil {
			return err
		}
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	bySlot := map[uint16]*rueidis.LuaExec{}
	var order []uint16
	now := s.now()
	exec := func(key string) *rueidis.LuaExec {
		sl := uint16(0)
		if s.cluster {
			sl = HashSlot(key)
		}
		e := bySlot[sl]
		if e == nil {
			e = &rueidis.LuaExec{Args: []string{now, s.expire()}}
			bySlot[sl] = e
			order = append(order, sl)
		}
		return e
	}
	for _, a := range adj {
		op := a.Op()
		if op == 0 {
			continue
		}
		key := s.Key(a.Spec.Kind, a.Key)
		e := exec(key)
		sign, d := string(op), a.Delta
		switch op {
		case 'p':
			d = int64(a.Pause)
		case 'l':
			d = max(d, 0)
		case '-':
			d = -d
		}
		e.Keys = append(e.Keys, key)
		e.Args = append(e.Args, string(kindLetter(a.Spec.Kind)), sign, hex64(d), hex64(max(a.RefundBefore, 0)))
		e.Args = append(e.Args, s.paramsOf(a.Spec)...)
		e.Args = append(e.Args, s.baseMark(a.Spec, a.Base))
	}
	if len(order) == 0 {
		if release {
			return s.release(ctx, slots)
		}
		return nil
	}
	if release {
		// Each slot's set: released in its hash slot's call (the 12 fields
		// of an adjustment: kind, 'r', the slot id, nine empty).
		for _, k := range slots.Keys {
			e := exec(k)
			e.Keys = append(e.Keys, k)
			e.Args = append(e.Args, string(kindLetter(store.Concurrency)), "r", slots.ID, "", "", "", "", "", "", "", "", "")
		}
	}
	execs := make([]rueidis.LuaExec, len(order))
	for i, sl := range order {
		execs[i] = *bySlot[sl]
	}
	for _, r := range s.scripts.adjust(ctx, execs) {
		if err := r.Error(); err != nil {
			return s.fail("adjust", err)
		}
		if n, err := r.AsInt64(); err == nil && n == 0 {
			return s.full("adjust") // at maxmemory: it would create a key
		}
	}
	return nil
}

// ownKeys checks that keys are this store's (under its prefix).
func (s *Store) ownKeys(op string, keys []string) error {
	for _, k := range keys {
		if !strings.HasPrefix(k, s.cfg.prefix) {
			return fmt.Errorf("redisstore: %s: key %q is not one of this store's", op, k)
		}
	}
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, slots store.Slots) error {
	select {
	case <-s.closed:
		return store.ErrClosed
	default:
	}
	if slots.ID == "" || len(slots.Keys) == 0 {
		return nil
	}
	if err := s.ownKeys("release", slots.Keys); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.release(ctx, slots)
}

// release sends Release's ZREMs (the keys checked, ctx bounded).
func (s *Store) release(ctx context.Context, slots store.Slots) error {
	cmds := make(rueidis.Commands, 0, len(slots.Keys))
	for _, k := range slots.Keys {
		cmds = append(cmds, s.c.B().Zrem().Key(k).Member(slots.ID).Build())
	}
	for _, r := range s.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return s.fail("release", err)
		}
	}
	return nil
}

// renewScript moves a held slot's expiry (KEYS[1] a slot set, ARGV[1]
// the slot id) to ARGV[2] microseconds from now (ARGV[3], Unix us; empty:
// Redis' own TIME), never earlier, and with ARGV[4] '1' keeps the set's
// key alive that long; a slot released or expired is not revived.
var renewScript = rueidis.NewLuaScript(`
local us
if ARGV[3] == '' then
  local t = redis.call('TIME')
  us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  us = tonumber(ARGV[3])
end
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= us then return 0 end
local exp = us + tonumber(ARGV[2])
if tonumber(s) < exp then redis.call('ZADD', KEYS[1], string.format('%d', exp), ARGV[1]) end
if ARGV[4] == '1' then
  local want = math.ceil(tonumber(ARGV[2]) / 1000) + 1
  local pt = redis.call('PTTL', KEYS[1])
  if pt >= 0 and pt < want then redis.call('PEXPIRE', KEYS[1], want) end
end
return 1`)

// Renew implements store.Renewer: one script call per key of the slot
// (each on its own hash slot's node, so that it works on Redis Cluster).
func (s *Store) Renew(ctx context.Context, slots store.Slots, ttl time.Duration) error {
	select {
	case <-s.closed:
		return store.ErrClosed
	default:
	}
	if ttl <= 0 {
		return fmt.Errorf("redisstore: renew: ttl %v must be positive: %w", ttl, store.ErrInvalidItem)
	}
	if slots.ID == "" || len(slots.Keys) == 0 {
		return nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	now := ""
	if s.cfg.clock != nil {
		now = strconv.FormatInt(s.cfg.clock.Now().UnixNano()/1000, 10)
	}
	us := strconv.FormatInt(int64((ttl+time.Microsecond-1)/time.Microsecond), 10)
	for _, k := range slots.Keys {
		if !strings.HasPrefix(k, s.cfg.prefix) {
			return fmt.Errorf("redisstore: renew: key %q is not one of this store's", k)
		}
	}
	for _, k := range slots.Keys { // (one key per slot where a gate holds it: no batch to build)
		if err := renewScript.Exec(ctx, s.c, []string{k}, []string{slots.ID, us, now, s.expire()}).Error(); err != nil {
			return s.fail("renew", err)
		}
	}
	return nil
}

// Close implements store.Store. It closes the client if Open made it.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.closed)
		if s.own {
			s.c.Close()
		}
	})
	return nil
}

func newSlotID() string {
	var b [12]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
