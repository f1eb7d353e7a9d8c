// Tests of the overrides store on a real Redis and Redis Cluster: the
// conformance suite, instances sharing it, resets, the log, expiry, the
// cost of polling, maxmemory, and the figures of the docs.

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/overrides/overridetest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redisstore"
)

// overridesHarness makes overrides stores through open (a store on one
// Redis, a prefix of its own), and reopens them as a new Store on the
// same Redis and prefix.
func overridesHarness(open func(t *testing.T, prefix string) *redisstore.Store) overridetest.Harness {
	var mu sync.Mutex
	made := map[overrides.Store]struct {
		prefix string
		max    int
	}{}
	return overridetest.Harness{
		New: func(t *testing.T, max int) overrides.Store {
			p := prefix()
			x := open(t, p).Overrides(redisstore.OverridesOptions{Max: max})
			mu.Lock()
			made[x] = struct {
				prefix string
				max    int
			}{p, max}
			mu.Unlock()
			return x
		},
		Reopen: func(t *testing.T, s overrides.Store) overrides.Store {
			mu.Lock()
			m := made[s]
			mu.Unlock()
			s.Close()
			return open(t, m.prefix).Overrides(redisstore.OverridesOptions{Max: m.max})
		},
	}
}

func openPrefix(t *testing.T, p string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open("redis://"+srv.Addr(t), append([]redisstore.Option{redisstore.WithPrefix(p), redisstore.WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openClusterPrefix(t *testing.T, p string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open("redis+cluster://"+strings.Join(cluster.Addrs(t), ","), redisstore.WithPrefix(p), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOverridesConformance(t *testing.T) {
	overridetest.Run(t, overridesHarness(func(t *testing.T, p string) *redisstore.Store { return openPrefix(t, p) }))
}

func TestOverridesClusterConformance(t *testing.T) {
	overridetest.Run(t, overridesHarness(openClusterPrefix))
}

// Pages of one record: every Full answer is scanned, every incremental
// one read a page at a time.
func TestOverridesConformanceOnePerPage(t *testing.T) {
	h := overridesHarness(func(t *testing.T, p string) *redisstore.Store { return openPrefix(t, p) })
	newStore := h.New
	h.New = func(t *testing.T, max int) overrides.Store {
		x := newStore(t, max).(*redisstore.Overrides)
		return redisstore.WithOverridesPage(x, 1)
	}
	h.Reopen = nil
	overridetest.Run(t, h)
}

const overridesPolicy = `limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 100
    refill_per_second: 10
`

func overridesSet(t *testing.T) *overrides.Set {
	t.Helper()
	p, err := policy.Parse([]byte(overridesPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return overrides.NewSet(p)
}

func syncSet(t *testing.T, s *overrides.Set, st overrides.Store) {
	t.Helper()
	errs, err := overrides.Sync(ctx, s, st)
	if err != nil || len(errs) != 0 {
		t.Fatalf("Sync: %v %v", err, errs)
	}
}

var ctx = context.Background()

// Two instances on one Redis: a Put through A is in B's Set after one
// Sync, and so is its deletion.
func TestOverridesTwoInstances(t *testing.T) {
	p := prefix()
	a := openPrefix(t, p).Overrides(redisstore.OverridesOptions{})
	b := openPrefix(t, p).Overrides(redisstore.OverridesOptions{})
	setA, setB := overridesSet(t), overridesSet(t)
	syncSet(t, setA, a)
	syncSet(t, setB, b)
	o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "acme"}, Params: overrides.Params{Capacity: 500}}
	if _, err := overrides.PutShared(ctx, setA, a, o, time.Now()); err != nil {
		t.Fatal(err)
	}
	syncSet(t, setB, b)
	r := setB.Resolve("tenant_api", map[string]string{"tenant": "acme"}, time.Now())
	if r == nil || r.Limit().Bucket.Capacity != 500 {
		t.Fatalf("B resolves %v after one Sync", r)
	}
	if err := overrides.DeleteShared(ctx, setB, b, "tenant_api", o.Match); err != nil {
		t.Fatal(err)
	}
	syncSet(t, setA, a)
	if r := setA.Resolve("tenant_api", o.Match, time.Now()); r != nil {
		t.Fatalf("A still resolves %v after B deleted it", r.Override())
	}
}

// FLUSHALL, then new writes: an instance's since (of the store before)
// gets a Full answer, even once the new store's counter has passed it.
func TestOverridesVersionReset(t *testing.T) {
	r := startRedis(t) // (a server of its own: FLUSHALL)
	st, err := redisstore.Open("redis://"+r.Addr, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := st.Overrides(redisstore.OverridesOptions{})
	for i := range 3 {
		putRecord(t, x, fmt.Sprint("old", i), 0)
	}
	v := changes(t, x, 0).Version
	if err := st.Client().Do(ctx, st.Client().B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if ch := changes(t, x, v); !ch.Full || len(ch.Records) != 0 {
		t.Fatalf("after FLUSHALL Changes(%d) = %+v, want Full and empty", v, ch)
	}
	for i := range 10 { // past v's counter
		putRecord(t, x, fmt.Sprint("new", i), 0)
	}
	ch := changes(t, x, v)
	if !ch.Full || len(ch.Records) != 10 {
		t.Fatalf("after FLUSHALL and 10 puts Changes(%d) = Full %v with %d records, want Full with 10", v, ch.Full, len(ch.Records))
	}
	if ch.Version == v {
		t.Fatal("the new store has the old one's version")
	}
}

// A since older than the log gets a Full answer; one within it does not.
func TestOverridesLogOverflow(t *testing.T) {
	x := openPrefix(t, prefix()).Overrides(redisstore.OverridesOptions{LogSize: 4})
	putRecord(t, x, "a", 0)
	v := changes(t, x, 0).Version
	for i := range 4 {
		putRecord(t, x, fmt.Sprint("b", i), 0)
	}
	if ch := changes(t, x, v); ch.Full || len(ch.Records) != 4 {
		t.Fatalf("4 changes with a log of 4: %+v, want them incrementally", ch)
	}
	putRecord(t, x, "c", 0)
	if ch := changes(t, x, v); !ch.Full || len(ch.Records) != 6 {
		t.Fatalf("5 changes with a log of 4: Full %v with %d records, want Full with 6", ch.Full, len(ch.Records))
	}
}

// An expiry is reported deleted to every instance, whichever Changes
// deleted it from Redis.
func TestOverridesExpiryOnEveryInstance(t *testing.T) {
	p := prefix()
	xs := []*redisstore.Overrides{
		openPrefix(t, p).Overrides(redisstore.OverridesOptions{}),
		openPrefix(t, p).Overrides(redisstore.OverridesOptions{}),
		openPrefix(t, p).Overrides(redisstore.OverridesOptions{}),
	}
	short := overridetest.Record("l", "short", 1, 0)
	short.ExpiresAt = time.Now().Add(200 * time.Millisecond).UTC().Truncate(time.Millisecond)
	if _, err := xs[0].Put(ctx, short); err != nil {
		t.Fatal(err)
	}
	putRecord(t, xs[0], "long", 3600)
	var vs []uint64
	for _, x := range xs {
		vs = append(vs, changes(t, x, 0).Version)
	}
	time.Sleep(time.Until(short.ExpiresAt) + 50*time.Millisecond)
	for i, x := range xs {
		ch := changes(t, x, vs[i])
		if ch.Full || len(ch.Deleted) != 1 || ch.Deleted[0] != short.Key() || len(ch.Records) != 0 {
			t.Fatalf("instance %d after the expiry: %+v, want short deleted", i, ch)
		}
	}
	if n, err := xs[2].Len(ctx); err != nil || n != 1 {
		t.Fatalf("Len = %d %v, want 1", n, err)
	}
}

// The cost of polling: Changes with nothing changed is one EVALSHA, and
// Put and Delete one each; HSCAN only for a Full answer over more than a
// page of records.
func TestOverridesCallCount(t *testing.T) {
	// A server of its own: INFO commandstats counts every client's
	// commands, and a store an earlier test left (its reconnects, its
	// script loads) must not count here.
	own := startRedis(t)
	st, err := redisstore.Open("redis://"+own.Addr, redisstore.WithPrefix(prefix()), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	x := st.Overrides(redisstore.OverridesOptions{PageSize: 10})
	for i := range 25 {
		putRecord(t, x, fmt.Sprint("t", i), 0)
	}
	v := changes(t, x, 0).Version // (loads the script)
	before := commandStats(t, st.Client())
	const polls = 50
	for range polls {
		if ch := changes(t, x, v); ch.Full || len(ch.Records)+len(ch.Deleted) != 0 || ch.Version != v {
			t.Fatalf("Changes(current) = %+v", ch)
		}
	}
	// (INFO commandstats counts the commands a script runs too: TIME,
	// HMGET and two ZRANGEBYSCORE a poll, all inside its one call.)
	d := statsDelta(before, commandStats(t, st.Client()))
	if d["evalsha"] != polls || d["eval"] != 0 || d["hscan"] != 0 || d["hgetall"] != 0 || total(d) != 5*polls+1 { // (+1: the INFO itself)
		t.Fatalf("%d polls cost %v, want %d EVALSHA (each running 4 commands) and nothing else", polls, d, polls)
	}
	// (a Delete of nothing loads its script: its first use is an EVAL)
	if err := x.Delete(ctx, "l", map[string]string{"tenant": "none"}); !errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("Delete of nothing: %v", err)
	}
	before = commandStats(t, st.Client())
	putRecord(t, x, "t0", 0)
	if err := x.Delete(ctx, "l", map[string]string{"tenant": "t1"}); err != nil {
		t.Fatal(err)
	}
	if d := statsDelta(before, commandStats(t, st.Client())); d["evalsha"] != 2 || d["eval"] != 0 || d["hscan"] != 0 {
		t.Fatalf("a Put and a Delete cost %v, want 2 EVALSHA", d)
	}
	before = commandStats(t, st.Client())
	if ch := changes(t, x, 0); !ch.Full || len(ch.Records) != 24 {
		t.Fatalf("Full: %d records", len(ch.Records))
	}
	// (HSCAN's COUNT is a floor per call on a hashtable-encoded hash: 24
	// records in pages of 10 take two or three calls, as buckets fall.)
	if d := statsDelta(before, commandStats(t, st.Client())); d["evalsha"] != 2 || d["hscan"] < 2 || d["hscan"] > 3 {
		t.Fatalf("a Full read of 24 records in pages of 10 cost %v, want 2 EVALSHA and 2 or 3 HSCAN pages", d)
	}
}

// A Full read in pages stays whole while writers change the store under
// it: the result is the store at the answer's version.
func TestOverridesFullWhileWriting(t *testing.T) {
	st := openPrefix(t, prefix())
	x := redisstore.WithOverridesPage(st.Overrides(redisstore.OverridesOptions{}), 7)
	for i := range 200 {
		putRecord(t, x, fmt.Sprint("t", i), 0)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			putRecord(t, x, fmt.Sprint("w", i), 0)
			if err := x.Delete(ctx, "l", map[string]string{"tenant": fmt.Sprint("t", i%200)}); err != nil && !errors.Is(err, overrides.ErrNotFound) {
				t.Error(err)
				return
			}
		}
	}()
	var fulls []overrides.Changes
	for range 5 {
		fulls = append(fulls, changes(t, x, 0))
	}
	close(stop)
	wg.Wait()
	for _, ch := range fulls {
		// The store at ch.Version, replayed from ch: the changes since it
		// bring it to the final state, which a Full read gives.
		held := map[overrides.Key]bool{}
		for _, o := range ch.Records {
			held[o.Key()] = true
		}
		later := changes(t, x, ch.Version)
		if later.Full {
			t.Fatal("the log lost a Full answer's version")
		}
		for _, k := range later.Deleted {
			delete(held, k)
		}
		for _, o := range later.Records {
			held[o.Key()] = true
		}
		final := changes(t, x, 0)
		if len(final.Records) != len(held) {
			t.Fatalf("a Full answer at %d replayed to %d records; the store holds %d", ch.Version, len(held), len(final.Records))
		}
		for _, o := range final.Records {
			if !held[o.Key()] {
				t.Fatalf("%v is in the store, not in the replayed Full answer", o.Key())
			}
		}
	}
}

// Redis' errors come back classified, and a closed store says so.
func TestOverridesErrors(t *testing.T) {
	st := openPrefix(t, prefix())
	x := st.Overrides(redisstore.OverridesOptions{})
	keys := x.Keys()
	if err := st.Client().Do(ctx, st.Client().B().Set().Key(keys[1]).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := x.Put(ctx, overridetest.Record("l", "a", 1, 0))
	var e *redisstore.Error
	if !errors.As(err, &e) || e.Class != redisstore.ClassWrongtype || e.Op != "overrides" {
		t.Fatalf("Put over a string key: %v, want a wrongtype *Error", err)
	}
	if _, err := x.Changes(ctx, 0); redisstore.Classify(err) != redisstore.ClassWrongtype {
		t.Fatalf("Changes over a string key: %v", err)
	}
	bad := overridetest.Record("l", "a", 1, 0)
	bad.Deny = true // with a capacity
	if _, err := x.Put(ctx, bad); !errors.Is(err, overrides.ErrBadRequest) {
		t.Fatalf("Put of deny with a capacity: %v, want ErrBadRequest", err)
	}
	x.Close()
	if _, err := x.Changes(ctx, 0); !errors.Is(err, overrides.ErrClosed) {
		t.Fatalf("Changes after Close: %v", err)
	}
	y := st.Overrides(redisstore.OverridesOptions{})
	st.Close()
	if err := y.Delete(ctx, "l", nil); !errors.Is(err, overrides.ErrClosed) {
		t.Fatalf("Delete after the Store's Close: %v", err)
	}
}

// The figures of the docs (run with -v): a Changes round trip with
// nothing changed and with one change, on one Redis and on the cluster; a
// Full read; Redis memory per override (MEMORY USAGE of each key over the
// count), with a TTL on half of them and the log full.
func TestOverridesFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	const n = 20000
	for _, where := range []string{"redis", "cluster"} {
		t.Run(where, func(t *testing.T) {
			var st *redisstore.Store
			if where == "redis" {
				st = openPrefix(t, prefix())
			} else {
				st = openClusterPrefix(t, prefix())
			}
			x := st.Overrides(redisstore.OverridesOptions{})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < n; i += 8 {
						o := overridetest.Record("tenant_api", fmt.Sprintf("tenant-%06d", i), 500, int64(i%2)*86400)
						o.Note = "trial"
						if _, err := x.Put(ctx, o); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			start := time.Now()
			full := changes(t, x, 0)
			fullTook := time.Since(start)
			if len(full.Records) != n {
				t.Fatalf("Full: %d records", len(full.Records))
			}
			const polls = 2000
			c := st.Client()
			calls0, usec0 := scriptUsec(t, c)
			start = time.Now()
			for range polls {
				changes(t, x, full.Version)
			}
			idle := time.Since(start) / polls
			calls1, usec1 := scriptUsec(t, c)
			t.Logf("%s: in Redis, %.1f µs a Changes with nothing changed (EVALSHA, INFO commandstats)", where, float64(usec1-usec0)/float64(calls1-calls0))
			start = time.Now()
			v := full.Version
			for i := range polls / 10 {
				putRecord(t, x, fmt.Sprint("p", i), 0)
				v = changes(t, x, v).Version
			}
			one := time.Since(start) / (polls / 10)
			var mem []int64
			for _, k := range x.Keys() {
				m, err := c.Do(ctx, c.B().MemoryUsage().Key(k).Samples(0).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				mem = append(mem, m)
			}
			rec := mustJSON(t, full.Records[0])
			t.Logf("%s: Changes with nothing changed %v a call; a Put then a Changes of it %v; a Full read of %d records %v (%v a record)",
				where, idle, one, n, fullTook, fullTook/n)
			t.Logf("%s: a record of %d bytes of JSON; memory per override: records %d bytes, expiries %d (half have a TTL), log %d (%d entries); meta %d bytes",
				where, len(rec), mem[1]/n, mem[2]/n, mem[3]/n, n+polls/10, mem[0])
		})
	}
}

func mustJSON(t *testing.T, o overrides.Override) string {
	t.Helper()
	b, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func putRecord(t *testing.T, x overrides.Store, tenant string, ttl int64) overrides.Override {
	t.Helper()
	o, err := x.Put(ctx, overridetest.Record("l", tenant, 1, ttl))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func changes(t *testing.T, x overrides.Store, since uint64) overrides.Changes {
	t.Helper()
	ch, err := x.Changes(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// commandStats reads INFO commandstats: calls by command.
func commandStats(t *testing.T, c rueidis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, ln := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(ln), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// scriptUsec returns EVALSHA's calls and microseconds so far, summed over
// the nodes.
func scriptUsec(t *testing.T, c rueidis.Client) (calls, usec int64) {
	t.Helper()
	for _, n := range c.Nodes() {
		info, err := n.Do(ctx, n.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(info, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		line, _, _ := strings.Cut(rest, "\r\n")
		var perCall float64
		var c, u int64
		if _, err := fmt.Sscanf(line, "calls=%d,usec=%d,usec_per_call=%f", &c, &u, &perCall); err != nil {
			t.Fatalf("commandstats %q: %v", line, err)
		}
		calls, usec = calls+c, usec+u
	}
	return calls, usec
}

func statsDelta(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

func total(d map[string]int64) int64 {
	var n int64
	for _, v := range d {
		n += v
	}
	return n
}

// At maxmemory (noeviction) instances keep polling: Changes answers
// (expiries wait, read-only), Put is refused as OOM with nothing written,
// Delete still deletes; once memory is freed the expiry is reported.
func TestOverridesAtMaxmemory(t *testing.T) {
	r := startRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	st, err := redisstore.Open("redis://"+r.Addr, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := st.Overrides(redisstore.OverridesOptions{})
	short := overridetest.Record("l", "short", 1, 0)
	short.ExpiresAt = time.Now().Add(300 * time.Millisecond).UTC().Truncate(time.Millisecond)
	if _, err := x.Put(ctx, short); err != nil {
		t.Fatal(err)
	}
	putRecord(t, x, "kept", 0)
	putRecord(t, x, "gone", 0)
	v := changes(t, x, 0).Version
	fillToOOM(t, r.Addr)
	time.Sleep(time.Until(short.ExpiresAt) + 50*time.Millisecond)
	if ch := changes(t, x, v); ch.Full || len(ch.Records)+len(ch.Deleted) != 0 {
		t.Fatalf("at OOM Changes(%d) = %+v, want nothing yet", v, ch)
	}
	_, err = x.Put(ctx, overridetest.Record("l", "new", 1, 0))
	wantClass(t, "Put at OOM", err, redisstore.ClassOOM)
	if err := x.Delete(ctx, "l", map[string]string{"tenant": "gone"}); err != nil {
		t.Fatalf("Delete at OOM: %v", err)
	}
	ch := changes(t, x, v)
	if len(ch.Deleted) != 1 || ch.Deleted[0] != overrides.KeyOf("l", map[string]string{"tenant": "gone"}) {
		t.Fatalf("at OOM after a Delete: %+v", ch)
	}
	if _, err := redistest.Do(r.Addr, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	ch = changes(t, x, ch.Version)
	if len(ch.Deleted) != 1 || ch.Deleted[0] != short.Key() {
		t.Fatalf("memory freed: %+v, want the expiry", ch)
	}
	if full := changes(t, x, 0); len(full.Records) != 1 {
		t.Fatalf("Full: %+v", full)
	}
}

// A match whose descriptors are named like the record's times does not
// confuse the store's splice of created_at.
func TestOverridesMatchNamedLikeTimes(t *testing.T) {
	x := openPrefix(t, prefix()).Overrides(redisstore.OverridesOptions{})
	m := map[string]string{"created_at": "1999-01-01T00:00:00.000Z", "updated_at": "x", "expires_at": "null"}
	first := overrides.Override{Name: "l", Match: m, Params: overrides.Params{Capacity: 1}, Note: `,"created_at":"2000-01-01T00:00:00Z"`}
	first.Stamp(time.Now().Add(-time.Hour), time.Time{})
	if _, err := x.Put(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := first
	second.Capacity = 2
	second.Stamp(time.Now(), time.Time{})
	got, err := x.Put(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	want := second
	want.CreatedAt = first.CreatedAt
	want.Source = overrides.SourceAPI
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stored %+v, want %+v", got, want)
	}
	if recs := changes(t, x, 0).Records; len(recs) != 1 || !reflect.DeepEqual(recs[0], want) {
		t.Fatalf("read back %+v, want %+v", recs, want)
	}
}
