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
// still all-or-nothing on its own); a lone caller is never delayed.
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
// lease. In-flight limits are a sorted set of lease ids per key, scored by
// expiry (Unix microseconds): a crashed holder's slot comes back after the
// lease TTL.
//
// All-or-nothing across keys: on a single Redis, and on a cluster when
// every key of a request is in one hash slot, one script decides them all.
// Keys with a hash tag — a "{...}" at the start of the item key, which the
// policy's hash_tag field produces — share a slot with every key of the
// same tag. On a cluster, a request whose keys span slots is reserved slot
// by slot (in parallel) and, if any slot refuses, the reservations that
// succeeded are refunded exactly; see Take for the precision boundary.
package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
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
)

// DefaultTimeout bounds every call to Redis unless WithTimeout says
// otherwise.
const DefaultTimeout = 250 * time.Millisecond

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "sluice:"

// Option configures New and Open.
type Option func(*config)

type config struct {
	prefix  string
	timeout time.Duration
	clock   sluice.Clock
	pool    int
}

// WithPrefix sets the prefix of every Redis key (default "sluice:"); it
// must not contain '{' or '}' (they would change the hash slot).
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTimeout bounds every call (default DefaultTimeout); a caller's
// earlier deadline wins.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithPoolSize sets the connections per Redis node for blocking calls
// (rueidis' BlockingPoolSize); decisions are pipelined on one connection
// per node whatever the pool.
func WithPoolSize(n int) Option { return func(c *config) { c.pool = n } }

// WithScriptClock makes the script use c's time instead of Redis TIME, and
// disables key expiry (Redis would expire keys on its own clock). It is
// for tests and simulations that must step time; never for production,
// where instances must share Redis' clock.
func WithScriptClock(c sluice.Clock) Option { return func(cf *config) { cf.clock = c } }

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
}

// Open connects to the Redis at rawURL: redis://[user:password@]host:port[/db],
// rediss:// (TLS), or redis+cluster://host1:port,host2:port,... (and
// rediss+cluster://) for a Redis Cluster. rueidis' URL query options
// (dial_timeout, write_timeout, skip_verify...) are accepted. A single
// Redis that does not answer yet is not an error (calls fail until it
// does); a cluster none of whose nodes answers is.
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

// ParseURL turns a store URL into rueidis options (see Open).
func ParseURL(rawURL string) (rueidis.ClientOption, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: invalid URL %q: %w", Redact(rawURL), err)
	}
	cluster := false
	switch u.Scheme {
	case "redis", "rediss":
	case "redis+cluster", "rediss+cluster":
		cluster = true
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		hosts := strings.Split(u.Host, ",")
		u.Host = hosts[0]
		q := u.Query()
		for _, h := range hosts[1:] {
			if h != "" {
				q.Add("addr", h)
			}
		}
		u.RawQuery = q.Encode()
	default:
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL scheme %q: want redis, rediss, redis+cluster or rediss+cluster", u.Scheme)
	}
	if u.Host == "" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL %q has no host", Redact(rawURL))
	}
	opt, err := rueidis.ParseURL(u.String())
	if err != nil {
		return opt, fmt.Errorf("redisstore: %w", err)
	}
	opt.ForceSingleClient = !cluster
	opt.DisableCache = true // no client-side caching: every decision reads Redis
	opt.DisableAutoPipelining = true
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = time.Second
	}
	if opt.ConnWriteTimeout == 0 {
		opt.ConnWriteTimeout = 2 * time.Second
	}
	return opt, nil
}

// Redact returns rawURL with its password hidden, for logs.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func newConfig(opts []Option) config {
	cfg := config{prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

func (cfg config) check() error {
	if strings.ContainsAny(cfg.prefix, "{}") {
		return fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", cfg.prefix)
	}
	if cfg.timeout <= 0 {
		return fmt.Errorf("redisstore: timeout %v must be positive", cfg.timeout)
	}
	if cfg.pool < 0 {
		return fmt.Errorf("redisstore: pool size %d must not be negative", cfg.pool)
	}
	return nil
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

// Ping checks that Redis answers within the store's timeout.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	for _, r := range s.c.DoMulti(ctx, s.c.B().Ping().Build()) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.timeout)
}

// Key returns the Redis key of an item key under spec kind k: the prefix,
// the item's hash tag if it starts with one, a kind letter, and the key.
func (s *Store) Key(k store.Kind, key string) string {
	return s.cfg.prefix + string(kindLetter[k]) + ":" + key
}

// kindLetter is each kind's letter in keys, states and the scripts'
// arguments.
var kindLetter = [...]byte{store.TokenBucket: 'b', store.SlidingWindow: 's', store.Concurrency: 'c', store.FixedWindow: 'f', store.Quota: 'q'}

func hex64(v int64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	u := uint64(v)
	for i := 15; i >= 0; i-- {
		b[i] = digits[u&15]
		u >>= 4
	}
	return string(b[:])
}

func parseHex(v rueidis.RedisMessage) (int64, error) {
	str, err := v.ToString()
	if err != nil {
		return 0, err
	}
	u, err := strconv.ParseUint(str, 16, 64)
	return int64(u), err
}

// FitsDoublePath reports whether the script may decide a token bucket of
// spec sp on plain doubles (its parameters are small enough that every
// intermediate can be an exact integer below 2^53; each decision still
// checks its own numbers and falls back to exact limbs when a state is out
// of that range, so both give the same decision). It needs whole units per
// nanosecond (bucket.Params.Ratio's Den below 2^26; Den is 1 for limits of
// the form N per second, minute, hour or day) and a capacity below 2^52
// units; a rate that is no simple fraction usually does not fit. False for
// other kinds.
func FitsDoublePath(sp *store.Spec) bool {
	if sp == nil || sp.Kind != store.TokenBucket {
		return false
	}
	num, den, _ := sp.Bucket.Ratio()
	return den < 1<<26 && sp.Bucket.CapacityUnits() < 1<<52 && num/den < 1<<52
}

// specArgs is how the script is told of a spec: its kind tag and 7
// parameter fields.
type specArgs struct {
	tag    string
	fields []string
}

// paramsOf returns the script's 7 parameter fields for sp.
func (s *Store) paramsOf(sp *store.Spec) []string { return s.argsOf(sp).fields }

// argsOf returns the script's arguments for sp (cached: specs are
// immutable). A token bucket whose numbers fit doubles exactly also gets
// qn and rn (num = qn*den + rn), which select the script's double path,
// and a tag naming its parameters (the script parses them once per tag);
// others take the exact limb path.
func (s *Store) argsOf(sp *store.Spec) *specArgs {
	if sp.Kind == store.Quota {
		return &specArgs{tag: "q", fields: s.quotaArgs(sp)}
	}
	if a, ok := s.params.Load(sp); ok {
		return a.(*specArgs)
	}
	var p []string
	tag := string(kindLetter[sp.Kind])
	switch sp.Kind {
	case store.TokenBucket:
		b := &sp.Bucket
		num, den, _ := b.Ratio()
		qn, rn := "", ""
		if FitsDoublePath(sp) {
			qn, rn = strconv.FormatUint(num/den, 10), strconv.FormatUint(num%den, 10)
		}
		p = []string{hex64(b.Unit()), hex64(b.CapacityUnits()), hex64(int64(num)), hex64(int64(den)), hex64(b.MaxElapsed()), qn, rn}
		if qn != "" {
			sum := sha256.Sum256([]byte(strings.Join(p, ",")))
			tag += hex.EncodeToString(sum[:8])
		}
	case store.SlidingWindow, store.FixedWindow:
		p = []string{hex64(sp.Window.Limit), hex64(int64(sp.Window.Window)), "", "", "", "", ""}
	default:
		p = []string{strconv.FormatInt(sp.MaxInFlight, 10), strconv.FormatInt(int64(sp.LeaseTTL/time.Microsecond), 10), "", "", "", "", ""}
	}
	a := &specArgs{tag: tag, fields: p}
	s.params.Store(sp, a)
	return a
}

// quotaArgs are a quota's 7 parameter fields: its limit and four period
// starts around this host's time (the previous period's, the current's,
// the next's and the one after), from which the script takes the period
// holding the store's clock. The script refuses the call (before deciding
// anything) when the store's clock is outside them: a clock a whole period
// away from this host's.
func (s *Store) quotaArgs(sp *store.Spec) []string {
	now := time.Now().UnixNano()
	if s.cfg.clock != nil {
		now = s.cfg.clock.Now().UnixNano()
	}
	q := sp.Quota
	b1, b2 := q.Bounds(now)
	b0, _ := q.Bounds(b1 - 1)
	_, b3 := q.Bounds(b2)
	return []string{hex64(q.Limit), hex64(b0), hex64(b1), hex64(b2), hex64(b3), "", ""}
}

func (s *Store) now() string {
	if s.cfg.clock == nil {
		return ""
	}
	return hex64(s.cfg.clock.Now().UnixNano())
}

func (s *Store) expire() string {
	if s.cfg.clock == nil {
		return "1"
	}
	return "0"
}

// Take implements store.Store. On a single Redis (or one hash slot) the
// decision is one atomic script. On a cluster, items in different slots
// are reserved slot by slot, all at once; when any slot refuses, the
// others' reservations are refunded exactly (store.Adjust semantics) and
// their leases released. Precision boundary: between a reservation and its
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
	lease := ""
	for _, it := range items {
		if it.Spec.Kind == store.Concurrency && it.Cost > 0 {
			lease = newLeaseID()
			break
		}
	}
	res := store.Result{Allowed: true}
	var groups [][]int
	if s.cluster && len(items) > 1 {
		groups = s.groups(items)
	}
	if len(groups) > 1 {
		ok, err := s.takeSlots(ctx, items, groups, lease)
		if err != nil {
			return store.Result{}, err
		}
		res.Allowed = ok
	} else {
		c := callPool.Get().(*call)
		c.items, c.lease, c.ok, c.err, c.queued = items, lease, false, nil, false
		c.self[0] = c
		if s.cluster {
			s.run(ctx, c.self[:])
		} else if !s.submit(ctx, c) {
			select {
			case <-c.done:
			case <-ctx.Done():
				// The batch still holds c: leave it to the garbage collector.
				return store.Result{}, fmt.Errorf("redisstore: take: %w", ctx.Err())
			}
		}
		var err error
		res.Allowed, err = c.ok, c.err
		c.items, c.err, c.self[0] = nil, nil, nil
		callPool.Put(c)
		if err != nil {
			return store.Result{}, err
		}
	}
	if !res.Allowed {
		for i := range items {
			items[i].RefundBefore = 0
		}
		return res, nil
	}
	for _, it := range items {
		if it.Spec.Kind == store.Concurrency && it.Cost > 0 {
			res.Lease.ID = lease
			res.Lease.Keys = append(res.Lease.Keys, s.Key(store.Concurrency, it.Key))
		}
	}
	return res, nil
}

// call is one request in a batch.
type call struct {
	items  []store.Item
	lease  string
	ok     bool
	err    error
	queued bool          // decided by another caller's batch: signal done
	done   chan struct{} // buffered: one signal per use, so calls are reused
	self   [1]*call      // a batch of just this call, without allocating
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// Batching: at most maxInFlight script calls are in flight; a request
// that finds them all busy queues, and the next call to finish sends the
// queue (up to maxBatch requests) as one script call. A lone caller is
// never delayed; many callers share round trips and script calls.
const (
	maxInFlight = 2
	maxBatch    = 64
)

// submit runs c at once (returning true) when a slot is free, else queues
// it (false; c.done closes when it is decided).
func (s *Store) submit(ctx context.Context, c *call) bool {
	s.mu.Lock()
	if s.inflight < maxInFlight {
		s.inflight++
		s.mu.Unlock()
		s.run(ctx, c.self[:]) // its own call: the caller's deadline applies
		s.next()
		return true
	}
	c.queued = true
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	return false
}

// next hands the slot to the queued requests: one goroutine sends batch
// after batch while requests keep queueing, then frees the slot.
func (s *Store) next() {
	if batch := s.dequeue(); batch != nil {
		go func() {
			for ; batch != nil; batch = s.dequeue() {
				s.run(context.Background(), batch)
			}
		}()
	}
}

// dequeue takes the next batch from the queue, or frees the caller's slot
// and returns nil when the queue is empty.
func (s *Store) dequeue() []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.inflight--
		return nil
	}
	n := min(len(s.queue), maxBatch)
	batch := make([]*call, n)
	copy(batch, s.queue)
	s.queue = append(s.queue[:0], s.queue[n:]...)
	return batch
}

// run decides a batch in one script call (bounded by the store timeout)
// and closes every call's done.
func (s *Store) run(ctx context.Context, batch []*call) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n := 0
	for _, c := range batch {
		n += len(c.items)
	}
	keys := make([]string, 0, n)
	// The batch's specs, each sent once.
	var specBuf [8]*store.Spec
	specs := specBuf[:0]
	index := func(sp *store.Spec) int {
		for i, x := range specs {
			if x == sp {
				return i + 1
			}
		}
		specs = append(specs, sp)
		return len(specs)
	}
	tail := make([]string, 0, 1+2*len(batch)+2*n)
	tail = append(tail, itoa(int64(len(batch))))
	for _, c := range batch {
		tail = append(tail, c.lease, itoa(int64(len(c.items))))
		for i := range c.items {
			it := &c.items[i]
			keys = append(keys, s.Key(it.Spec.Kind, it.Key))
			cost := itoa(it.Cost)
			if it.Cost >= 1<<53 {
				cost = "x" + hex64(it.Cost)
			}
			tail = append(tail, itoa(int64(index(it.Spec))), cost)
		}
	}
	args := make([]string, 0, 3+8*len(specs)+len(tail))
	args = append(args, s.now(), s.expire(), itoa(int64(len(specs))))
	for _, sp := range specs {
		a := s.argsOf(sp)
		args = append(args, a.tag)
		args = append(args, a.fields...)
	}
	args = append(args, tail...)
	err := s.decode(s.scripts.take(ctx, keys, args), batch)
	for _, c := range batch {
		if err != nil {
			c.err = fmt.Errorf("redisstore: take: %w", err)
		}
		if c.queued {
			c.done <- struct{}{}
		}
	}
}

// small holds the decimal strings of 0..1023 (spec indexes, common costs
// and counts), so that building a batch's arguments allocates less.
var small = func() (s [1024]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func itoa(i int64) string {
	if i >= 0 && i < int64(len(small)) {
		return small[i]
	}
	return strconv.FormatInt(i, 10)
}

// value reads a reply value: an integer, or hex digits for 2^53 and more.
func value(m rueidis.RedisMessage) (int64, error) {
	if m.IsInt64() {
		return m.AsInt64()
	}
	return parseHex(m)
}

// decode writes a take reply's decisions into the calls' items.
func (s *Store) decode(r rueidis.RedisResult, batch []*call) error {
	arr, err := r.ToArray()
	if err != nil {
		return err
	}
	if len(arr) < 2 {
		return fmt.Errorf("script returned %d values", len(arr))
	}
	fast, err := arr[0].AsInt64()
	if err != nil {
		return err
	}
	now, err := parseHex(arr[1])
	if err != nil {
		return err
	}
	s.fast.Add(uint64(fast))
	arr = arr[2:]
	for _, c := range batch {
		if len(arr) < 1 {
			return fmt.Errorf("script returned too few values")
		}
		all, err := arr[0].AsInt64()
		if err != nil {
			return err
		}
		c.ok = all == 1
		per := 4
		if c.ok {
			per = 2 // admitted: remaining and reset
		}
		arr = arr[1:]
		if len(arr) < per*len(c.items) {
			return fmt.Errorf("script returned too few values")
		}
		for i := range c.items {
			f := arr[per*i:]
			var v [4]int64 // allowed, remaining, retry, reset
			if c.ok {
				v[0] = 1
				if v[1], err = value(f[0]); err == nil {
					v[3], err = value(f[1])
				}
			} else {
				for k := range v {
					if v[k], err = value(f[k]); err != nil {
						break
					}
				}
			}
			if err != nil {
				return err
			}
			it := &c.items[i]
			it.Decision = sluice.Decision{Allowed: v[0] == 1, Remaining: v[1], RetryAfter: time.Duration(v[2]), ResetAfter: time.Duration(v[3])}
			it.RefundBefore = 0
			if c.ok && it.Cost > 0 {
				it.RefundBefore = store.RefundBefore(it.Spec, now, time.Duration(v[3]))
			}
		}
		s.decided.Add(uint64(len(c.items)))
		arr = arr[per*len(c.items):]
	}
	if len(arr) != 0 {
		return fmt.Errorf("script returned %d values too many", len(arr))
	}
	return nil
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

// takeSlots is Take over several hash slots of a cluster: each slot's
// items are reserved by its own script call (all at once), and if any
// slot refuses, the reservations of the others are refunded.
func (s *Store) takeSlots(ctx context.Context, items []store.Item, groups [][]int, lease string) (bool, error) {
	calls := make([]*call, len(groups))
	var wg sync.WaitGroup
	for g, idx := range groups {
		c := &call{lease: lease}
		for _, i := range idx {
			c.items = append(c.items, items[i])
		}
		calls[g] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, []*call{c})
		}()
	}
	wg.Wait()
	allowed := true
	var firstErr error
	okGroup := make([]bool, len(groups))
	for g, c := range calls {
		for j, i := range groups[g] {
			items[i].Decision, items[i].RefundBefore = c.items[j].Decision, c.items[j].RefundBefore
		}
		switch {
		case c.err != nil:
			if firstErr == nil {
				firstErr = c.err
			}
		case c.ok:
			okGroup[g] = true
		default:
			allowed = false
		}
	}
	if firstErr != nil || !allowed {
		// Undo what the slots that admitted took (with a fresh deadline:
		// the refund matters even if the caller gave up).
		s.undo(items, groups, okGroup, lease)
		if firstErr == nil {
			s.peekAdmitted(ctx, items, groups, okGroup)
		}
	}
	return allowed, firstErr
}

// peekAdmitted replaces the decisions of the slots that admitted a request
// refused elsewhere (and were refunded) by their state as it is now, as a
// refusal on one slot reports it: one peek per such slot, in parallel. A
// slot whose peek fails reports what it took added back to its Remaining.
func (s *Store) peekAdmitted(ctx context.Context, items []store.Item, groups [][]int, ok []bool) {
	var wg sync.WaitGroup
	for g, idx := range groups {
		if !ok[g] {
			continue
		}
		c := &call{}
		for _, i := range idx {
			c.items = append(c.items, store.Item{Key: items[i].Key, Spec: items[i].Spec})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, []*call{c})
			for j, i := range idx {
				it := &items[i]
				if c.err == nil {
					it.Decision = c.items[j].Decision
				} else if it.Spec.Kind == store.Concurrency && it.Cost > 0 {
					it.Decision.Remaining++
				} else {
					it.Decision.Remaining += it.Cost
				}
				it.Decision.Allowed, it.Decision.RetryAfter = true, 0
			}
		}()
	}
	wg.Wait()
}

// groups splits item indexes by hash slot (one group on a single Redis).
func (s *Store) groups(items []store.Item) [][]int {
	if !s.cluster || len(items) == 1 {
		idx := make([]int, len(items))
		for i := range idx {
			idx[i] = i
		}
		return [][]int{idx}
	}
	var slots []uint16
	var groups [][]int
	for i, it := range items {
		sl := Slot(s.Key(it.Spec.Kind, it.Key))
		g := -1
		for j, x := range slots {
			if x == sl {
				g = j
				break
			}
		}
		if g < 0 {
			slots = append(slots, sl)
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// undo refunds the groups that admitted a request refused elsewhere.
func (s *Store) undo(items []store.Item, groups [][]int, ok []bool, lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	var adj []store.Adjustment
	var rel store.Lease
	for g, idx := range groups {
		if !ok[g] {
			continue
		}
		for _, i := range idx {
			switch it := items[i]; {
			case it.Cost == 0:
			case it.Spec.Kind == store.Concurrency:
				rel.Keys = append(rel.Keys, s.Key(store.Concurrency, it.Key))
			default:
				adj = append(adj, store.Adjustment{Key: it.Key, Spec: it.Spec, Delta: -it.Cost, RefundBefore: it.RefundBefore})
			}
		}
	}
	if len(rel.Keys) > 0 {
		rel.ID = lease
		s.Release(ctx, rel)
	}
	if len(adj) > 0 {
		s.Adjust(ctx, adj)
	}
}

// Adjust implements store.Store: one script per hash slot.
func (s *Store) Adjust(ctx context.Context, adj []store.Adjustment) error {
	select {
	case <-s.closed:
		return store.ErrClosed
	default:
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	bySlot := map[uint16]*rueidis.LuaExec{}
	var order []uint16
	now := s.now()
	for _, a := range adj {
		if a.Spec == nil || a.Key == "" || a.Spec.HoldsSlots() || a.Delta == 0 {
			continue
		}
		key := s.Key(a.Spec.Kind, a.Key)
		sl := uint16(0)
		if s.cluster {
			sl = Slot(key)
		}
		e := bySlot[sl]
		if e == nil {
			e = &rueidis.LuaExec{Args: []string{now, s.expire()}}
			bySlot[sl] = e
			order = append(order, sl)
		}
		sign, d := "+", a.Delta
		if d < 0 {
			sign, d = "-", -d
		}
		e.Keys = append(e.Keys, key)
		e.Args = append(e.Args, string(kindLetter[a.Spec.Kind]), sign, hex64(d), hex64(max(a.RefundBefore, 0)))
		e.Args = append(e.Args, s.paramsOf(a.Spec)...)
	}
	if len(order) == 0 {
		return nil
	}
	execs := make([]rueidis.LuaExec, len(order))
	for i, sl := range order {
		execs[i] = *bySlot[sl]
	}
	for _, r := range s.scripts.adjust(ctx, execs) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("redisstore: adjust: %w", err)
		}
	}
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, lease store.Lease) error {
	select {
	case <-s.closed:
		return store.ErrClosed
	default:
	}
	if lease.ID == "" || len(lease.Keys) == 0 {
		return nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	cmds := make(rueidis.Commands, 0, len(lease.Keys))
	for _, k := range lease.Keys {
		if !strings.HasPrefix(k, s.cfg.prefix) {
			return fmt.Errorf("redisstore: release: key %q is not one of this store's", k)
		}
		cmds = append(cmds, s.c.B().Zrem().Key(k).Member(lease.ID).Build())
	}
	for _, r := range s.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("redisstore: release: %w", err)
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

func newLeaseID() string {
	var b [12]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Slot returns the Redis Cluster hash slot of key (CRC16 of its hash tag,
// the part between the first '{' and the next '}' when not empty).
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
