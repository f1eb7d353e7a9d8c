package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
)

const mwPolicy = `
limits:
  - name: per_ip
    key: "ip:{client_ip}"
    capacity: 2
    refill_per_second: 0.5
  - name: per_route
    key: "route:{route}"
    capacity: 100
    refill_per_second: 100
  - name: uploads
    key: "uploads"
    when: {route: "POST /upload"}
    max_in_flight: 1
    lease_ttl: 1m
`

func mwLimiter(t *testing.T, s store.Store) *limiter.Limiter {
	t.Helper()
	p, err := policy.Parse([]byte(mwPolicy))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func frozenStore() store.Store {
	return memstore.New(memstore.WithClock(sluice.NewManualClock(time.Unix(1_800_000_000, 0))))
}

func TestMiddlewareRefusesWith429AndHeaders(t *testing.T) {
	l := mwLimiter(t, frozenStore())
	mux := http.NewServeMux()
	mw := httplimit.NewMiddleware(l, httplimit.Combine(httplimit.ClientIP(), httplimit.Route()))
	mux.Handle("GET /items", mw.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "items") })))
	ts := httptest.NewServer(mux)
	defer ts.Close()
	for i, want := range []int{200, 200, 429} {
		resp, err := http.Get(ts.URL + "/items")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if want == 429 {
			if resp.Header.Get("Retry-After") != "2" || resp.Header.Get("RateLimit") != `"per_ip";r=0;t=2` ||
				resp.Header.Get("RateLimit-Policy") != `"per_ip";q=2;w=4` {
				t.Fatalf("headers %v", resp.Header)
			}
		} else if resp.Header.Get("RateLimit") == "" {
			t.Fatalf("admitted without RateLimit: %v", resp.Header)
		}
	}
}

// The in-flight slot is held while the handler runs and released after.
func TestMiddlewareInFlight(t *testing.T) {
	l := mwLimiter(t, memstore.New())
	mux := http.NewServeMux()
	release := make(chan struct{})
	var running atomic.Int64
	mw := httplimit.NewMiddleware(l, httplimit.Route())
	mux.Handle("POST /upload", mw.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		<-release
	})))
	ts := httptest.NewServer(mux)
	defer ts.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Post(ts.URL+"/upload", "text/plain", nil)
		if err == nil {
			resp.Body.Close()
		}
	}()
	for running.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Post(ts.URL+"/upload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Fatalf("second upload while one runs: %d", resp.StatusCode)
	}
	close(release)
	wg.Wait()
	resp, err = http.Post(ts.URL+"/upload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the first finished: %d", resp.StatusCode)
	}
}

type brokenStore struct{ store.Store }

func (brokenStore) Take(context.Context, []store.Item) (store.Result, error) {
	return store.Result{}, errors.New("connection refused")
}

func TestMiddlewareStoreFailure(t *testing.T) {
	for _, open := range []bool{false, true} {
		l := mwLimiter(t, brokenStore{memstore.New()})
		var opts []httplimit.MiddlewareOption
		if open {
			opts = append(opts, httplimit.FailOpen())
		}
		h := httplimit.NewMiddleware(l, httplimit.ClientIP(), opts...).Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		ts := httptest.NewServer(h)
		resp, err := http.Get(ts.URL)
		ts.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 503, true: 200}[open]; resp.StatusCode != want {
			t.Fatalf("fail open %v: %d", open, resp.StatusCode)
		}
	}
}

func TestClientIPTrustedProxies(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	f := httplimit.ClientIP(trusted...)
	for _, tc := range []struct{ remote, xff, want string }{
		{"203.0.113.9:1234", "1.2.3.4", "203.0.113.9"},            // not a proxy: XFF ignored
		{"10.1.2.3:80", "198.51.100.7, 10.9.9.9", "198.51.100.7"}, // skip trusted hops from the right
		{"10.1.2.3:80", "6.6.6.6, 198.51.100.7", "198.51.100.7"},  // the forged left part is not used
		{"10.1.2.3:80", "", "10.1.2.3"},
		{"10.1.2.3:80", "garbage", "10.1.2.3"},
		{"[::ffff:127.0.0.1]:80", "2001:db8::1", "2001:db8::1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		d, err := f(r)
		if err != nil || d["client_ip"] != tc.want {
			t.Errorf("%s %q: %v %v, want %s", tc.remote, tc.xff, d, err, tc.want)
		}
	}
	if _, err := httplimit.Header("X-API-Key", "api_key", true)(httptest.NewRequest("GET", "/", nil)); err == nil {
		t.Error("missing required header accepted")
	}
	// An oversized descriptor never reaches the store.
	l := mwLimiter(t, memstore.New())
	h := httplimit.NewMiddleware(l, httplimit.Header("X-API-Key", "api_key", true)).Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", strings.Repeat("k", httplimit.MaxDescriptorBytes+1))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 400 {
		t.Errorf("oversized descriptor: %d", rec.Code)
	}
}

// Limit an HTTP API per client address and per route.
func ExampleNewMiddleware() {
	p, _ := policy.Parse([]byte(`
limits:
  - name: per_client
    key: "ip:{client_ip}"
    capacity: 1
    refill_per_second: 0.1
`))
	l, _ := limiter.New(p, memstore.New())
	mw := httplimit.NewMiddleware(l, httplimit.ClientIP())
	ts := httptest.NewServer(mw.Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	})))
	defer ts.Close()
	for range 2 {
		resp, _ := http.Get(ts.URL)
		resp.Body.Close()
		fmt.Printf("%d retry-after=%q\n", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 retry-after=""
	// 429 retry-after="10"
}

// The middleware answers errors as the sluice service does: JSON {"error",
// "code"}, a cost above a capacity 422 cost_exceeds_capacity naming the
// limit, a KeyFunc error 400, a failed store 503 store_error; a refusal is
// 429 with a JSON body saying how long to wait.
func TestMiddlewareErrorAnswers(t *testing.T) {
	l := mwLimiter(t, frozenStore())
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	get := func(h http.Handler) (int, string, http.Header) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
		return rec.Code, strings.TrimSpace(rec.Body.String()), rec.Header()
	}
	key := httplimit.ClientIP()
	cases := []struct {
		name string
		h    http.Handler
		code int
		body string
	}{
		{"cost above capacity", httplimit.NewMiddleware(l, key, httplimit.WithRequestCost(func(*http.Request) int64 { return 3 })).Handle(ok),
			422, `{"error":"cost 3 exceeds capacity 2 of limit \"per_ip\": it can never be admitted","code":"cost_exceeds_capacity","limit":"per_ip"}`},
		{"key error", httplimit.NewMiddleware(l, func(*http.Request) (map[string]string, error) { return nil, errors.New("no tenant") }).Handle(ok),
			400, `{"error":"rate limit: no tenant","code":"bad_request"}`},
		{"store down", httplimit.NewMiddleware(mwLimiter(t, failing{}), key).Handle(ok),
			503, `{"error":"the limit store failed: down","code":"store_error"}`},
	}
	for _, c := range cases {
		code, body, h := get(c.h)
		if code != c.code || body != c.body || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s (%s), want %d %s", c.name, code, body, h.Get("Content-Type"), c.code, c.body)
		}
	}
	mw := httplimit.NewMiddleware(l, key).Handle(ok)
	get(mw)
	get(mw)
	code, body, h := get(mw)
	if code != 429 || body != `{"error":"rate limit exceeded","code":"rate_limited","retry_after_ms":2000}` || h.Get("Retry-After") != "2" {
		t.Errorf("refusal: %d %s %v", code, body, h)
	}
}

type failing struct{}

func (failing) Take(context.Context, []store.Item) (store.Result, error) {
	return store.Result{}, errors.New("down")
}
func (failing) Release(context.Context, store.Slots) error       { return nil }
func (failing) Adjust(context.Context, []store.Adjustment) error { return nil }
func (failing) Close() error                                     { return nil }

// FromPolicy reads the descriptors the policy's request_descriptors name
// from the request itself: each API key its own bucket, the route by
// prefix.
func TestMiddlewareFromPolicy(t *testing.T) {
	p, err := policy.Parse([]byte(`
request_descriptors:
  api_key: {from: header, name: X-API-Key}
  route:   {from: path, prefixes: [/export]}
limits:
  - {name: per_key, key: "key:{api_key}", capacity: 1, refill_per_second: 0.01}
  - {name: exports, key: "exports", when: {route: /export}, capacity: 2, refill_per_second: 0.01}
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(p, frozenStore())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(httplimit.NewMiddleware(l, httplimit.FromPolicy(l)).Handle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer ts.Close()
	get := func(path, key string) *http.Response {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("X-API-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if a, b, c := get("/export/x", "k1").StatusCode, get("/export/y", "k2").StatusCode, get("/x", "k1").StatusCode; a != 200 || b != 200 || c != 429 {
		t.Fatalf("rule: one bucket per API key read from the header: %d %d %d", a, b, c)
	}
	if a, b := get("/export/z", "k3"), get("/other", "k4"); a.StatusCode != 429 || !strings.Contains(a.Header.Get("RateLimit"), `"exports";r=0`) || b.StatusCode != 200 {
		t.Fatalf("rule: the route by prefix: /export/* spends the exports limit (2 used), /other does not: %d %v, %d", a.StatusCode, a.Header, b.StatusCode)
	}
}
