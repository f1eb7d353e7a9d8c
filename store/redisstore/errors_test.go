// Tests of what a failed Redis call means: a Redis at maxmemory, a
// replica, a key of the wrong type, a library that cannot be loaded, and
// connection settings Redis refuses — each on a real redis-server.

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redisstore"
)

// startRedis starts a redis-server of the test's own with extra arguments.
func startRedis(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	return redistest.New(t, extra...)
}

// fillToOOM writes junk keys until Redis answers OOM (it runs under
// maxmemory-policy noeviction), then lowers maxmemory by 256 KB: a
// refused write's query buffer counts until its connection closes, so
// Redis sits at the boundary otherwise, and must stay over it.
func fillToOOM(t *testing.T, addr string) {
	t.Helper()
	junk := strings.Repeat("x", 64<<10)
	for i := range 10000 {
		_, err := redistest.Do(addr, "SET", fmt.Sprintf("junk:%d", i), junk)
		if err != nil && strings.HasPrefix(err.Error(), "OOM") {
			info, err := redistest.Bulk(addr, "INFO", "memory")
			if err != nil {
				t.Fatal(err)
			}
			_, rest, _ := strings.Cut(info, "used_memory:")
			used, _, _ := strings.Cut(rest, "\r\n")
			n, err := strconv.ParseInt(used, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", used, err)
			}
			if _, err := redistest.Do(addr, "CONFIG", "SET", "maxmemory", strconv.FormatInt(n-256<<10, 10)); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("Redis never reached maxmemory")
}

func wantClass(t *testing.T, what string, err error, class string) {
	t.Helper()
	var e *redisstore.Error
	if err == nil || !errors.As(err, &e) || e.Class != class || redisstore.Classify(err) != class || e.Refused() != (class != redisstore.ClassUnreachable) {
		t.Fatalf("%s: error %v (%T), want class %s", what, err, err, class)
	}
}

// At maxmemory under noeviction, Redis answers OOM to every decision.
// The store keeps deciding keys that exist — exactly, as before — and
// refuses (store.ErrFull, class oom) a request that would create a key;
// peeks and returns still work, a charge on a new key is refused, Ping
// reports the OOM, and once memory is freed new keys are decided again.
func TestOOMDecidesExistingKeysRefusesNewOnes(t *testing.T) {
	r := startRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	s, err := redisstore.Open("redis://"+r.Addr, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	sp := mustSpec(t, 100, 0.001)
	slots, err := store.NewSpec(store.Limit{Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	take := func(key string, cost int64) (bool, error) {
		res, err := s.Take(ctx, []store.Item{{Key: key, Spec: sp, Cost: cost}})
		return res.Allowed, err
	}
	if ok, err := take("old", 1); !ok || err != nil {
		t.Fatalf("before OOM: %v %v", ok, err)
	}
	held, err := s.Take(ctx, []store.Item{{Key: "slots", Spec: slots, Cost: 1}})
	if err != nil || !held.Allowed {
		t.Fatalf("slot before OOM: %+v %v", held, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping before OOM: %v", err)
	}
	fillToOOM(t, r.Addr)

	// The existing bucket: 99 tokens left of 100, exactly.
	admitted := 0
	for range 150 {
		ok, err := take("old", 1)
		if err != nil {
			t.Fatalf("existing key at OOM: %v", err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 99 {
		t.Fatalf("existing key at OOM: %d admitted of 150, want 99", admitted)
	}
	// A second slot on the existing set, then none beyond max_in_flight.
	if res, err := s.Take(ctx, []store.Item{{Key: "slots", Spec: slots, Cost: 1}}); err != nil || !res.Allowed {
		t.Fatalf("slot on an existing set at OOM: %+v %v", res, err)
	}
	// A new key: refused, never admitted.
	ok, err := take("new", 1)
	if ok || !errors.Is(err, store.ErrFull) {
		t.Fatalf("new key at OOM: allowed %v, error %v; want store.ErrFull", ok, err)
	}
	wantClass(t, "new key at OOM", err, redisstore.ClassOOM)
	// A request with an existing and a new key: refused whole, the
	// existing bucket untouched.
	if _, err := s.Take(ctx, []store.Item{{Key: "old", Spec: sp, Cost: 0}, {Key: "new2", Spec: sp, Cost: 1}}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("mixed request at OOM: %v", err)
	}
	// A peek on a new key writes nothing: decided.
	items := []store.Item{{Key: "new", Spec: sp, Cost: 0}}
	if res, err := s.Take(ctx, items); err != nil || !res.Allowed || items[0].Decision.Remaining != 100 {
		t.Fatalf("peek at OOM: %+v %+v %v", res, items[0].Decision, err)
	}
	// Adjustments: a return on the existing key works, a charge on a new
	// one is refused.
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "old", Spec: sp, Delta: -10, RefundBefore: 1 << 62}}); err != nil {
		t.Fatalf("return at OOM: %v", err)
	}
	if ok, err := take("old", 10); !ok || err != nil {
		t.Fatalf("the 10 returned at OOM: %v %v", ok, err)
	}
	err = s.Adjust(ctx, []store.Adjustment{{Key: "new3", Spec: sp, Delta: 5}})
	if !errors.Is(err, store.ErrFull) {
		t.Fatalf("charge on a new key at OOM: %v", err)
	}
	wantClass(t, "charge at OOM", err, redisstore.ClassOOM)
	// Release works at OOM (ZREM frees memory).
	if err := s.Release(ctx, held.Slots); err != nil {
		t.Fatalf("release at OOM: %v", err)
	}
	err = s.Ping(ctx)
	wantClass(t, "Ping at OOM", err, redisstore.ClassOOM)
	if n := s.ErrorCounts()[redisstore.ClassOOM]; n < 3 {
		t.Fatalf("oom errors counted: %d", n)
	}
	if n := s.ErrorCounts()[redisstore.ClassUnreachable]; n != 0 {
		t.Fatalf("unreachable errors counted at OOM: %d", n)
	}
	// Memory freed: new keys again.
	if _, err := redistest.Do(r.Addr, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after OOM: %v", err)
	}
	if ok, err := take("new", 1); !ok || err != nil {
		t.Fatalf("new key after OOM: %v %v", ok, err)
	}
}

// A replica answers READONLY: a refusal, not an outage, and Ping says so.
func TestReplicaIsReadonly(t *testing.T) {
	master := startRedis(t)
	replica := startRedis(t)
	host, port, _ := strings.Cut(master.Addr, ":")
	if _, err := redistest.Do(replica.Addr, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.Open("redis://"+replica.Addr, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	res, err := s.Take(ctx, []store.Item{{Key: "k", Spec: mustSpec(t, 10, 1), Cost: 1}})
	if res.Allowed {
		t.Fatal("a replica admitted")
	}
	wantClass(t, "take on a replica", err, redisstore.ClassReadonly)
	wantClass(t, "Ping on a replica", s.Ping(ctx), redisstore.ClassReadonly)
}

// A key of the store's that holds another type answers WRONGTYPE; Ping
// reports it for a while (a probe cannot see a key's refusal).
func TestWrongType(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	slots, err := store.NewSpec(store.Limit{Kind: store.Concurrency, MaxInFlight: 5, SlotTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr(t), "SET", s.Key(store.Concurrency, "k"), "not a set"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(ctx, []store.Item{{Key: "k", Spec: slots, Cost: 1}})
	wantClass(t, "take on a string key", err, redisstore.ClassWrongtype)
	wantClass(t, "Ping after WRONGTYPE", s.Ping(ctx), redisstore.ClassWrongtype)
	if n := s.ErrorCounts()[redisstore.ClassWrongtype]; n != 1 {
		t.Fatalf("wrongtype counted %d times, want 1 (Ping reports the take's)", n)
	}
}

// A Redis where the function library cannot be loaded (an ACL user
// without FUNCTION) answers "Function not found" after every load
// attempt: class noscript, not an outage.
func TestLibraryCannotLoad(t *testing.T) {
	r := startRedis(t)
	if _, err := redistest.Do(r.Addr, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-function"); err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.Open("redis://app:pw@"+r.Addr, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	_, err = s.Take(ctx, []store.Item{{Key: "k", Spec: mustSpec(t, 10, 1), Cost: 1}})
	wantClass(t, "take without the library", err, redisstore.ClassNoscript)
	wantClass(t, "Ping without the library", s.Ping(ctx), redisstore.ClassNoscript)
}

// Connection settings Redis refuses are an error of Open matching
// ErrConfig; a Redis that does not answer is not an error.
func TestOpenRefusedSettings(t *testing.T) {
	r := startRedis(t, "--requirepass", "pw")
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	for _, tc := range []struct{ url, want string }{
		{"redis://:pw@" + r.Addr + "/16", "DB index is out of range"},
		{"redis://:pw@" + r.Addr + "/99999999999", "out of range"},
		{"redis://:wrong@" + r.Addr, "WRONGPASS"},
		{"redis://" + r.Addr, "NOAUTH"},
		{"redis://ann:pw@" + r.Addr, "WRONGPASS"},
		{"redis://" + web.Listener.Addr().String(), "unknown message type"},
	} {
		s, err := redisstore.Open(tc.url)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, redisstore.ErrConfig) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), ":wrong@") {
			t.Errorf("%s: %v, want ErrConfig with %q", tc.url, err, tc.want)
		}
	}
	if _, err := redisstore.Open("redis://:pw@" + r.Addr + "/-1"); err == nil || !strings.Contains(err.Error(), "must be 0 or more") {
		t.Errorf("/-1: %v", err)
	}
	if _, err := redisstore.Open("redis+cluster://:pw@" + r.Addr + "/2"); err == nil || !strings.Contains(err.Error(), "only database 0") {
		t.Errorf("cluster /2: %v", err)
	}
	// Good settings, and an unreachable Redis: no error.
	for _, u := range []string{"redis://:pw@" + r.Addr + "/15", "redis://127.0.0.1:1"} {
		s, err := redisstore.Open(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		s.Close()
	}
}

func TestClassify(t *testing.T) {
	for msg, want := range map[string]string{
		"OOM command not allowed when used memory > 'maxmemory'.":                          redisstore.ClassOOM,
		"ERR Error running script (call to f_x): @user_script:1: -OOM command not allowed": redisstore.ClassOOM,
		"READONLY You can't write against a read only replica.":                            redisstore.ClassReadonly,
		"NOSCRIPT No matching script. Please use EVAL.":                                    redisstore.ClassNoscript,
		"ERR Function not found":                                                           redisstore.ClassNoscript,
		"WRONGTYPE Operation against a key holding the wrong kind of value":                redisstore.ClassWrongtype,
		"LOADING Redis is loading the dataset in memory":                                   redisstore.ClassUnreachable,
		"BUSY Redis is busy running a script.":                                             redisstore.ClassUnreachable,
		"ERR max number of clients reached":                                                redisstore.ClassUnreachable,
		"NOPERM this user has no permissions":                                              redisstore.ClassOther,
	} {
		if got := redisstore.ClassifyReply(msg); got != want {
			t.Errorf("%q: %s, want %s", msg, got, want)
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{context.Canceled, ""},
		{context.DeadlineExceeded, redisstore.ClassUnreachable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), redisstore.ClassUnreachable},
		{errors.New("EOF"), redisstore.ClassUnreachable},
		{errors.New("received unknown message type: 72"), redisstore.ClassOther},
	} {
		if got := redisstore.Classify(tc.err); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.err, got, tc.want)
		}
	}
}
