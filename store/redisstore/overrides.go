// Overrides: an overrides.Store on Redis or Redis Cluster, its keys in one
// hash slot, every change one atomic script.

package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/overrides"
)

// OverridesTag is the hash tag of every key of the overrides store: they
// share one hash slot (so one node of a cluster holds them all, and each
// script on them is atomic).
const OverridesTag = "{sluice-overrides}"

// Defaults of OverridesOptions.
const (
	// DefaultOverridesLog is how many changes the log keeps.
	DefaultOverridesLog = 1 << 16
	// DefaultOverridesPage is the most records one call carries.
	DefaultOverridesPage = 1000
)

// OverridesOptions configures Store.Overrides and NewOverrides.
type OverridesOptions struct {
	// Max caps the live overrides held (overrides.ErrTooMany past it);
	// 0 is overrides.DefaultMax (sluice serve --max-overrides).
	Max int
	// LogSize is how many changes Changes can answer incrementally: a
	// since older than the last LogSize changes gets a Full answer. 0 is
	// DefaultOverridesLog.
	LogSize int
	// PageSize is the most records one Redis call carries (a Full answer
	// over more records is read in pages, HSCAN); 0 is
	// DefaultOverridesPage.
	PageSize int
	// Now is the clock expiries are judged by. Nil: the store's script
	// clock (WithScriptClock) if it has one, else Redis TIME, the one
	// clock every instance shares.
	Now func() time.Time
}

// Overrides is an overrides.Store on Redis or Redis Cluster, shared by
// every instance that opens it on the same Redis with the same prefix.
// Its keys (the store's prefix, then OverridesTag) are four, in one hash
// slot: a hash of the records (field: the limit's name, a NUL byte, the
// canonical match; value: the record as overrides.Override.MarshalJSON
// writes it), a sorted set of their expiries, a log of the last changes
// (a sorted set of fields by the number of their last change) and a hash
// of the store's epoch and change counter. None has a TTL: under a
// volatile-* maxmemory-policy Redis never evicts them (under allkeys-*
// it may, and overrides would be lost).
//
// Put, Delete and Changes are one script each, atomic, and each first
// deletes the records expired by its time (as changes of their own, so
// every instance is told). A Put or Delete that changes the store also
// publishes on Channel, which Watch subscribes to. Changes with nothing changed is one small
// call; a Full answer over more records than a page is read in pages
// (HSCAN), then brought to one version through the log. Each Redis call
// is bounded by the store's timeout (WithTimeout) and the caller's
// context; its error is an *Error (op "overrides", counted in the
// store's ErrorCounts).
//
// A version is the store's epoch (a random number drawn at its first
// change: a store emptied, by FLUSHALL or otherwise, and written again
// has another) with its change counter: a since of another epoch, newer
// than the store, or older than its log is answered Full.
type Overrides struct {
	s       *Store
	opt     OverridesOptions
	keys    []string
	channel string // Channel's
	closed  atomic.Bool
	skipped atomic.Uint64
}

var _ overrides.Store = (*Overrides)(nil)

// Overrides returns the overrides store on s's Redis, under s's prefix,
// with s's timeout, clock and error counts. Closing it leaves s open;
// closing s closes it.
func (s *Store) Overrides(opt OverridesOptions) *Overrides {
	if opt.Max <= 0 {
		opt.Max = overrides.DefaultMax
	}
	if opt.LogSize <= 0 {
		opt.LogSize = DefaultOverridesLog
	}
	if opt.PageSize <= 0 {
		opt.PageSize = DefaultOverridesPage
	}
	base := s.cfg.prefix + OverridesTag + ":"
	return &Overrides{s: s, opt: opt, keys: []string{base + "meta", base + "records", base + "expiries", base + "log"}, channel: base + "changed"}
}

// NewOverrides returns the overrides store on client c (which the caller
// keeps and closes), configured by opts as New is (WithPrefix,
// WithTimeout, WithScriptClock).
func NewOverrides(c rueidis.Client, opt OverridesOptions, opts ...Option) (*Overrides, error) {
	s, err := New(c, opts...)
	if err != nil {
		return nil, err
	}
	return s.Overrides(opt), nil
}

// Keys returns the Redis keys of the store: meta, records, expiries, log.
func (x *Overrides) Keys() []string { return append([]string(nil), x.keys...) }

// Skipped returns how many records Changes has left out so far because
// they could not be decoded (something else wrote them): a Full answer
// omits them, an incremental one reports them deleted.
func (x *Overrides) Skipped() uint64 { return x.skipped.Load() }

// Close implements overrides.Store. It leaves the Store open.
func (x *Overrides) Close() error {
	x.closed.Store(true)
	return nil
}

func (x *Overrides) check() error {
	if x.closed.Load() {
		return overrides.ErrClosed
	}
	select {
	case <-x.s.closed:
		return overrides.ErrClosed
	default:
		return nil
	}
}

// OverridesField returns the field of the records hash holding the override of key
// k: its name, a NUL byte (which a canonical match never holds), its
// canonical match.
func OverridesField(k overrides.Key) string { return k.Name + "\x00" + k.Match }

func keyOfField(f string) overrides.Key {
	i := strings.LastIndexByte(f, 0)
	if i < 0 {
		return overrides.Key{Name: f}
	}
	return overrides.Key{Name: f[:i], Match: f[i+1:]}
}

// now is the time argument of the scripts: empty for Redis TIME.
func (x *Overrides) now() string {
	switch {
	case x.opt.Now != nil:
		return strconv.FormatInt(x.opt.Now().UnixMilli(), 10)
	case x.s.cfg.clock != nil:
		return strconv.FormatInt(x.s.cfg.clock.Now().UnixMilli(), 10)
	}
	return ""
}

// Versions: the epoch in the bits above epochShift, the counter below.
const (
	epochShift = 48
	epochMax   = 1<<(63-epochShift) - 1
)

// candidate is a new epoch, for a store that has none yet.
func candidate() string { return strconv.FormatUint(1+rand.Uint64N(epochMax), 10) }

func version(epoch string, counter int64) (uint64, error) {
	e, err := strconv.ParseUint(epoch, 10, 64)
	if err != nil || e > epochMax || counter < 0 || counter >= 1<<epochShift {
		return 0, fmt.Errorf("store epoch %q, counter %d: not a version", epoch, counter)
	}
	if e == 0 {
		return 0, nil
	}
	return e<<epochShift | uint64(counter), nil
}

func splitVersion(v uint64) (epoch, counter string) {
	return strconv.FormatUint(v>>epochShift, 10), strconv.FormatUint(v&(1<<epochShift-1), 10)
}

// Put implements overrides.Store: one script that expires what is due,
// refuses at the cap (overrides.ErrTooMany) a record that would be new,
// keeps the live record's CreatedAt, and logs the change.
func (x *Overrides) Put(ctx context.Context, o overrides.Override) (overrides.Override, error) {
	if err := x.check(); err != nil {
		return overrides.Override{}, err
	}
	o.Source = overrides.SourceAPI
	b, err := json.Marshal(o)
	if err != nil {
		return overrides.Override{}, err
	}
	var valid overrides.Override
	if err := json.Unmarshal(b, &valid); err != nil { // the record's own checks, as a Store reads it back
		return overrides.Override{}, err
	}
	// The record around its created_at (MarshalJSON writes it third from
	// the end, before updated_at and expires_at, whose values hold no
	// quote).
	i, j := bytes.LastIndex(b, []byte(`,"created_at":`)), bytes.LastIndex(b, []byte(`,"updated_at":`))
	if i < 0 || j < i {
		return overrides.Override{}, fmt.Errorf("redisstore: overrides: unexpected record encoding %s", b)
	}
	i += len(`,"created_at":`)
	exp := ""
	if !o.ExpiresAt.IsZero() {
		exp = strconv.FormatInt(o.ExpiresAt.UnixMilli(), 10)
	}
	cctx, cancel := x.s.ctx(ctx)
	defer cancel()
	r := overridesPut.Exec(cctx, x.s.c, x.keys, []string{OverridesField(o.Key()), string(b[:i]), string(b[i:j]), string(b[j:]),
		exp, strconv.Itoa(x.opt.Max), strconv.Itoa(x.opt.LogSize), x.now(), candidate(), x.channel})
	a, err := r.ToArray()
	if err != nil {
		return overrides.Override{}, x.s.fail("overrides", err)
	}
	if n, err := a[0].AsInt64(); err == nil && n == -1 {
		return overrides.Override{}, &overrides.Error{Err: overrides.ErrTooMany, Limit: o.Name,
			Msg: fmt.Sprintf("the store holds its maximum of %d overrides", x.opt.Max)}
	}
	if len(a) != 3 {
		return overrides.Override{}, x.s.fail("overrides", fmt.Errorf("put: a reply of %d elements", len(a)))
	}
	rec, err := a[2].ToString()
	if err != nil {
		return overrides.Override{}, x.s.fail("overrides", err)
	}
	var stored overrides.Override
	if err := json.Unmarshal([]byte(rec), &stored); err != nil {
		return overrides.Override{}, fmt.Errorf("redisstore: overrides: the record stored does not decode: %w", err)
	}
	return stored, nil
}

// Delete implements overrides.Store: overrides.ErrNotFound when there is
// no live record (one expired is not).
func (x *Overrides) Delete(ctx context.Context, name string, m map[string]string) error {
	if err := x.check(); err != nil {
		return err
	}
	k := overrides.KeyOf(name, m)
	cctx, cancel := x.s.ctx(ctx)
	defer cancel()
	n, err := overridesDelete.Exec(cctx, x.s.c, x.keys, []string{OverridesField(k), strconv.Itoa(x.opt.LogSize), x.now(), candidate(), x.channel}).AsInt64()
	if err != nil {
		return x.s.fail("overrides", err)
	}
	if n == 0 {
		return &overrides.Error{Err: overrides.ErrNotFound, Limit: name, Field: "match",
			Msg: fmt.Sprintf("no override of limit %q with match %s", name, k.Match)}
	}
	return nil
}

// Len returns the number of records held (an expired one until a call
// deletes it): HLEN.
func (x *Overrides) Len(ctx context.Context) (int, error) {
	if err := x.check(); err != nil {
		return 0, err
	}
	cctx, cancel := x.s.ctx(ctx)
	defer cancel()
	n, err := x.s.c.Do(cctx, x.s.c.B().Hlen().Key(x.keys[1]).Build()).AsInt64()
	if err != nil {
		return 0, x.s.fail("overrides", err)
	}
	return int(n), nil
}

// errRestless is the error of a Changes that kept finding its view
// outdated while it read it.
var errRestless = errors.New("redisstore: overrides: the store changed faster than a full read could catch up (tried 3 times)")

// Changes implements overrides.Store. With nothing changed it is one
// call. An incremental answer over more than a page of changes takes a
// call per page. A Full answer is one call when the records fit in a
// page; otherwise the records are scanned (HSCAN, a page a call), then
// brought to the version of the last call through the log; should the
// log have moved past the scan's start meanwhile (more than LogSize
// changes during the scan), the read starts again, three times at most.
func (x *Overrides) Changes(ctx context.Context, since uint64) (overrides.Changes, error) {
	if err := x.check(); err != nil {
		return overrides.Changes{}, err
	}
	for range 3 {
		ch, again, err := x.changes(ctx, since)
		if err != nil || !again {
			return ch, err
		}
		since = 0
	}
	return overrides.Changes{}, errRestless
}

// page is one answer of the changes script.
type page struct {
	epoch   string
	counter int64
	mode    int64    // 0 the log, 1 every record, 2 Full to scan
	data    []string // mode 0: field, record, counter...; mode 1: field, record...
}

func (x *Overrides) call(ctx context.Context, epoch, counter string) (page, error) {
	cctx, cancel := x.s.ctx(ctx)
	defer cancel()
	a, err := overridesChanges.Exec(cctx, x.s.c, x.keys, []string{epoch, counter, strconv.Itoa(x.opt.PageSize), x.now(), candidate(), strconv.Itoa(x.opt.LogSize)}).ToArray()
	if err != nil {
		return page{}, x.s.fail("overrides", err)
	}
	var p page
	if len(a) != 4 {
		return p, x.s.fail("overrides", fmt.Errorf("changes: a reply of %d elements", len(a)))
	}
	if p.epoch, err = a[0].ToString(); err == nil {
		if p.counter, err = a[1].AsInt64(); err == nil {
			if p.mode, err = a[2].AsInt64(); err == nil {
				p.data, err = a[3].AsStrSlice()
			}
		}
	}
	if err != nil {
		return p, x.s.fail("overrides", err)
	}
	return p, nil
}

// changes reads the changes after since: again reports that the view
// moved while it was read (a Full read must start over).
func (x *Overrides) changes(ctx context.Context, since uint64) (ch overrides.Changes, again bool, err error) {
	e, c := splitVersion(since)
	p, err := x.call(ctx, e, c)
	if err != nil {
		return ch, false, err
	}
	var base map[string]string // a Full answer's records, by field
	switch p.mode {
	case 0:
		changed := map[string]string{}
		if p, again, err = x.catchUp(ctx, p, changed); err != nil || again {
			return ch, again, err
		}
		ch, err = x.answer(p, false, changed)
		return ch, false, err
	case 1:
		base = make(map[string]string, len(p.data)/2)
		for i := 0; i+1 < len(p.data); i += 2 {
			base[p.data[i]] = p.data[i+1]
		}
		ch, err = x.answer(p, true, base)
		return ch, false, err
	}
	if base, err = x.scan(ctx); err != nil {
		return ch, false, err
	}
	if p.epoch == "0" { // records, and no change counted (the meta hash lost): version 0, so Full again next time
		ch, err = x.answer(p, true, base)
		return ch, false, err
	}
	// The scan saw each record as it was at some point after p: the log
	// since p says which changed, and how they are now.
	q, err := x.call(ctx, p.epoch, strconv.FormatInt(p.counter, 10))
	if err != nil {
		return ch, false, err
	}
	if q.mode != 0 {
		return ch, true, nil
	}
	changed := map[string]string{}
	if q, again, err = x.catchUp(ctx, q, changed); err != nil || again {
		return ch, again, err
	}
	for f, rec := range changed {
		if rec == "" {
			delete(base, f)
		} else {
			base[f] = rec
		}
	}
	ch, err = x.answer(q, true, base)
	return ch, false, err
}

// catchUp reads the log from page p (mode 0) on, page by page, into
// changed (field -> record, "" for deleted; a later page's wins), and
// returns the last page. again: the log moved past the pages read.
func (x *Overrides) catchUp(ctx context.Context, p page, changed map[string]string) (page, bool, error) {
	for {
		last := ""
		for i := 0; i+2 < len(p.data); i += 3 {
			changed[p.data[i]] = p.data[i+1]
			last = p.data[i+2]
		}
		if len(p.data)/3 < x.opt.PageSize {
			return p, false, nil
		}
		epoch := p.epoch
		var err error
		if p, err = x.call(ctx, epoch, last); err != nil {
			return p, false, err
		}
		if p.mode != 0 || p.epoch != epoch {
			return p, true, nil
		}
	}
}

// scan reads every record, HSCAN a page at a time.
func (x *Overrides) scan(ctx context.Context) (map[string]string, error) {
	recs := map[string]string{}
	var cursor uint64
	for {
		cctx, cancel := x.s.ctx(ctx)
		e, err := x.s.c.Do(cctx, x.s.c.B().Hscan().Key(x.keys[1]).Cursor(cursor).Count(int64(x.opt.PageSize)).Build()).AsScanEntry()
		cancel()
		if err != nil {
			return nil, x.s.fail("overrides", err)
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			recs[e.Elements[i]] = e.Elements[i+1]
		}
		if cursor = e.Cursor; cursor == 0 {
			return recs, nil
		}
	}
}

// answer decodes records by field ("" deleted) into a Changes at page p's
// version; many records are decoded on every CPU.
func (x *Overrides) answer(p page, full bool, recs map[string]string) (overrides.Changes, error) {
	v, err := version(p.epoch, p.counter)
	if err != nil {
		return overrides.Changes{}, x.s.fail("overrides", err)
	}
	fields := make([]string, 0, len(recs))
	for f := range recs {
		fields = append(fields, f)
	}
	workers := min(runtime.GOMAXPROCS(0), len(fields)/decodeChunk+1)
	parts := make([]overrides.Changes, workers)
	var wg sync.WaitGroup
	for w := range parts {
		wg.Go(func() {
			lo, hi := len(fields)*w/workers, len(fields)*(w+1)/workers
			parts[w] = x.decode(fields[lo:hi], recs, full)
		})
	}
	wg.Wait()
	ch := overrides.Changes{Version: v, Full: full}
	if workers == 1 {
		ch.Records, ch.Deleted = parts[0].Records, parts[0].Deleted
		return ch, nil
	}
	nr, nd := 0, 0
	for _, part := range parts {
		nr, nd = nr+len(part.Records), nd+len(part.Deleted)
	}
	ch.Records, ch.Deleted = make([]overrides.Override, 0, nr), make([]overrides.Key, 0, nd)
	for _, part := range parts {
		ch.Records = append(ch.Records, part.Records...)
		ch.Deleted = append(ch.Deleted, part.Deleted...)
	}
	return ch, nil
}

// decodeChunk is the fewest records a decoding goroutine is given.
const decodeChunk = 2000

// decode decodes the records of fields: a record that does not decode,
// or not to its field's key, is skipped (counted; in an incremental
// answer, reported deleted).
func (x *Overrides) decode(fields []string, recs map[string]string, full bool) (ch overrides.Changes) {
	ch.Records = make([]overrides.Override, 0, len(fields))
	for _, f := range fields {
		if rec := recs[f]; rec != "" {
			var o overrides.Override
			if err := o.UnmarshalJSON([]byte(rec)); err == nil && o.Key() == keyOfField(f) {
				ch.Records = append(ch.Records, o)
				continue
			}
			x.skipped.Add(1)
			if full {
				continue
			}
		}
		ch.Deleted = append(ch.Deleted, keyOfField(f))
	}
	return ch
}
