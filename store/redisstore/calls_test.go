package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/redisstore"
)

// clientCalls counts the commands clients sent a redis-server since its
// SLOWLOG was reset (slowlog-log-slower-than 0: every command), by name:
// commands that scripts ran (client "?:0"), and the test's own, are left
// out. INFO commandstats counts a script's commands too, and cannot tell
// a script's ZREM from a client's.
func clientCalls(t *testing.T, c rueidis.Client) map[string]int64 {
	t.Helper()
	entries, err := c.Do(context.Background(), c.B().Arbitrary("SLOWLOG", "GET", "-1").Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 5 {
			t.Fatalf("SLOWLOG entry: %v", err)
		}
		args, _ := f[3].AsStrSlice()
		addr, _ := f[4].ToString()
		if len(args) == 0 || addr == "?:0" {
			continue
		}
		switch name := strings.ToLower(args[0]); name {
		case "slowlog", "config", "hello", "client", "ping", "function":
		default:
			out[name]++
		}
	}
	return out
}

// A shared gate call with a token estimate and a provider's headers costs
// Redis at most 2 calls: its booking (a Take), then its settle, the
// provider's remaining counts (both dimensions' ceilings) and the
// release of its in-flight slot in one adjust script call (Ticket.Finish
// through the transport). Counted on a redis-server of the test's own.
func TestSharedGateCallCostsTwoRedisCalls(t *testing.T) {
	srv := redistest.New(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000")
	st, err := redisstore.Open("redis://"+srv.Addr, redisstore.WithPrefix(prefix()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	left := 2_000_000
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		left -= 700
		h := w.Header()
		h.Set("x-ratelimit-limit-requests", "3000")
		h.Set("x-ratelimit-remaining-requests", "2500") // lowers the requests budget (2850) once, then nothing
		h.Set("x-ratelimit-limit-tokens", "2000000")
		h.Set("x-ratelimit-remaining-tokens", fmt.Sprint(left)) // always lower than the gate's
		h.Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage": {"total_tokens": 700}}`)
	}))
	defer provider.Close()
	g, err := gate.New(gate.Config{Name: "openai", Store: st, MaxInFlight: 8, MaxQueue: 8, MaxWait: 5 * time.Second,
		Limit:      bucket.Limit{Capacity: 2850, Rate: 47.5},
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 1_900_000, Rate: 1000}}}})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: httplimit.NewTransport(nil, g,
		httplimit.WithTokenEstimate(func(*http.Request) int64 { return 1000 }),
		httplimit.WithTokenUsage(httplimit.UsageFromJSON))}
	call := func() {
		t.Helper()
		res, err := client.Post(provider.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	call() // (the function library loaded)
	if err := st.Client().Do(context.Background(), st.Client().B().Arbitrary("SLOWLOG", "RESET").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for range n {
		call()
	}
	calls := clientCalls(t, st.Client())
	total := int64(0)
	for _, c := range calls {
		total += c
	}
	if total > 2*n {
		t.Fatalf("rule: a shared gate call costs Redis at most 2 calls (booking; settle, ceilings and release in one): %d for %d calls %v", total, n, calls)
	}
	if calls["zrem"] != 0 {
		t.Fatalf("rule: the slot is released inside the settle's script call: %v", calls)
	}
	if s := g.Stats(); s.InFlight != 0 || s.Dimensions[0].Tokens > float64(left) {
		t.Fatalf("every slot released, tokens lowered to the provider's %d: %+v", left, s)
	}
	t.Logf("%d calls: %v", n, calls)
}

// A ceiling that lowers nothing writes nothing: no key created for a new
// bucket, no write to one holding less.
func TestLowerNothingWritesNothing(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	sp := mustSpec(t, 100, 1)
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "new", Spec: sp, Lower: true, Delta: 50}}); err != nil {
		t.Fatal(err)
	}
	// (50 of a full 100 lowers it: the key exists)
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "other", Spec: sp, Lower: true, Delta: 100}}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Client().Do(ctx, s.Client().B().Exists().Key(s.Key(store.TokenBucket, "new"), s.Key(store.TokenBucket, "other")).Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("rule: a ceiling that lowers a bucket writes it, one at its capacity creates no key: %d of 2 keys exist (%v)", n, err)
	}
	key := s.Key(store.TokenBucket, "new")
	before, _ := s.Client().Do(ctx, s.Client().B().Dump().Key(key).Build()).ToString()
	if err := s.Adjust(ctx, []store.Adjustment{{Key: "new", Spec: sp, Lower: true, Delta: 99}}); err != nil {
		t.Fatal(err)
	}
	after, _ := s.Client().Do(ctx, s.Client().B().Dump().Key(key).Build()).ToString()
	if before != after || before == "" {
		t.Fatal("rule: a ceiling above what a bucket holds writes nothing (the state as it was)")
	}
}

// /v1/settle with "release": true on Redis: the settle and the release of
// the lease's in-flight slot are one call to the limiter's store (one
// FCALL, its ZREM inside), and the book hands the slots out with the
// receipt (its read and its take: no HGET of its own). 3 client calls,
// where /v1/settle and /v1/release made 5.
func TestSettleReleaseOneStoreCall(t *testing.T) {
	srv := redistest.New(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000")
	st, err := redisstore.Open("redis://"+srv.Addr, redisstore.WithPrefix(prefix()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := policy.Parse([]byte(`
limits:
  - name: tpm
    key: "api_key:{api_key}"
    capacity: 1000
    refill_per_second: 10
  - name: calls
    key: "api_key:{api_key}"
    max_in_flight: 1
    lease_ttl: 30s
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, st)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Limiter: l, Book: redisstore.NewBook(st, book.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	post := func(path, body string) string {
		t.Helper()
		res, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	for i := range 3 {
		ans := post("/v1/check", `{"descriptors": {"api_key": "k"}, "cost": 900}`)
		var m struct {
			Allowed bool   `json:"allowed"`
			Lease   string `json:"lease"`
		}
		if err := json.Unmarshal([]byte(ans), &m); err != nil || !m.Allowed || m.Lease == "" {
			t.Fatalf("check %d (admitted only if the last settle freed the slot and returned the 900): %s", i, ans)
		}
		lease := m.Lease
		if err := st.Client().Do(context.Background(), st.Client().B().Arbitrary("SLOWLOG", "RESET").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if ans := post("/v1/settle", `{"lease": "`+lease+`", "actual_cost": 0, "release": true}`); !strings.Contains(ans, `"released":true`) || !strings.Contains(ans, `"settled":true`) {
			t.Fatalf("settle and release: %s", ans)
		}
		calls := clientCalls(t, st.Client())
		if i == 0 {
			continue // (the book's scripts loaded: a NOSCRIPT, then EVAL)
		}
		if calls["fcall"] != 1 || calls["zrem"] != 0 || calls["hget"] != 0 || calls["evalsha"]+calls["eval"] > 2 {
			t.Fatalf("rule: settle and release in one store call (1 FCALL, no ZREM), the slots from the book's own calls (no HGET): %v", calls)
		}
	}
}
