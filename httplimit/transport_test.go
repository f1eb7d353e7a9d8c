package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
)

// script is a real HTTP server (on loopback, outside any synctest bubble)
// that answers each request with the next scripted reply.
type script struct {
	mu      sync.Mutex
	replies []reply
	bodies  []string
	srv     *httptest.Server
}

type reply struct {
	status  int
	headers map[string]string
}

func newScript(t *testing.T, replies ...reply) *script {
	s := &script{replies: replies}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		rep := reply{status: 200}
		if len(s.replies) > 0 {
			rep, s.replies = s.replies[0], s.replies[1:]
		}
		s.mu.Unlock()
		for k, v := range rep.headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.status)
		io.WriteString(w, "answer "+strconv.Itoa(rep.status))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *script) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

// client returns an http.Client whose transport goes through a gate. The
// base transport keeps no idle connections, so no goroutine outlives a
// request inside a synctest bubble.
func client(t *testing.T, cfg gate.Config, opts ...httplimit.TransportOption) (*http.Client, *gate.Gate) {
	t.Helper()
	g, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{DisableKeepAlives: true}
	return &http.Client{Transport: httplimit.NewTransport(base, g, opts...)}, g
}

var retrying = gate.Config{
	Limit: bucket.Limit{Capacity: 10, Rate: 10}, MaxQueue: 10,
	Retry: gate.Retry{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond},
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestRetryAfterSeconds(t *testing.T) {
	s := newScript(t, reply{429, map[string]string{"Retry-After": "3"}})
	synctest.Test(t, func(t *testing.T) {
		c, _ := client(t, retrying)
		start := time.Now()
		resp, body := get(t, c, s.srv.URL)
		if resp.StatusCode != 200 || body != "answer 200" || s.requests() != 2 {
			t.Fatalf("status %d body %q after %d requests", resp.StatusCode, body, s.requests())
		}
		if el := time.Since(start); el < 3*time.Second || el > 3100*time.Millisecond {
			t.Fatalf("retried after %v, want 3s (plus jitter)", el)
		}
	})
}

func TestRetryAfterHTTPDate(t *testing.T) {
	var date string
	s := newScript(t)
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		date = start.Add(5 * time.Second).UTC().Format(http.TimeFormat)
		s.replies = []reply{{503, map[string]string{"Retry-After": date}}}
		c, _ := client(t, retrying)
		resp, _ := get(t, c, s.srv.URL)
		if resp.StatusCode != 200 || time.Since(start) < 5*time.Second {
			t.Fatalf("status %d after %v", resp.StatusCode, time.Since(start))
		}
	})
}

func TestRateLimitFieldHint(t *testing.T) {
	s := newScript(t,
		reply{429, map[string]string{"RateLimit": `"burst";r=5;t=1, "daily";r=0;t=4`, "RateLimit-Policy": `"burst";q=100;w=60`}},
		reply{429, map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "2"}})
	synctest.Test(t, func(t *testing.T) {
		c, _ := client(t, retrying)
		start := time.Now()
		resp, _ := get(t, c, s.srv.URL)
		if resp.StatusCode != 200 || s.requests() != 3 {
			t.Fatalf("status %d after %d requests", resp.StatusCode, s.requests())
		}
		if el := time.Since(start); el < 6*time.Second || el > 6300*time.Millisecond {
			t.Fatalf("took %v, want 4s + 2s", el)
		}
	})
}

// Retries exhausted: the last answer comes back as it was.
func TestLastAnswerReturned(t *testing.T) {
	s := newScript(t,
		reply{503, nil}, reply{503, map[string]string{"Retry-After": "soon"}}, reply{429, map[string]string{"Retry-After": "1"}})
	synctest.Test(t, func(t *testing.T) {
		c, g := client(t, retrying)
		resp, body := get(t, c, s.srv.URL)
		if resp.StatusCode != 429 || body != "answer 429" || s.requests() != 3 {
			t.Fatalf("status %d body %q requests %d", resp.StatusCode, body, s.requests())
		}
		if st := g.Stats(); st.AdmittedRetries != 2 || st.PausedUntil.IsZero() {
			t.Fatalf("stats %+v: the last hint must still pause the gate", st)
		}
	})
}

// A POST without Idempotency-Key is not retried, but its hint pauses the
// gate for everyone; with the key and a rewindable body it is retried with
// the same body.
func TestIdempotency(t *testing.T) {
	s := newScript(t, reply{429, map[string]string{"Retry-After": "2"}}, reply{429, map[string]string{"Retry-After": "2"}})
	synctest.Test(t, func(t *testing.T) {
		c, _ := client(t, retrying)
		start := time.Now()
		resp, err := c.Post(s.srv.URL, "text/plain", bytes.NewReader([]byte("payload-1")))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 429 || s.requests() != 1 || time.Since(start) != 0 {
			t.Fatalf("plain POST: status %d, %d requests, %v", resp.StatusCode, s.requests(), time.Since(start))
		}
		req, _ := http.NewRequest(http.MethodPost, s.srv.URL, bytes.NewReader([]byte("payload-2")))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// It waited out the first answer's pause (2 s), got a second 429,
		// and was retried after another 2 s.
		if resp.StatusCode != 200 || time.Since(start) < 4*time.Second {
			t.Fatalf("keyed POST: status %d after %v", resp.StatusCode, time.Since(start))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.bodies) != 3 || s.bodies[1] != "payload-2" || s.bodies[2] != "payload-2" {
			t.Fatalf("bodies %q", s.bodies)
		}
	})
}

// A hint beyond the cap counts as the cap; malformed hints are ignored.
func TestAbsurdAndMalformedHints(t *testing.T) {
	s := newScript(t,
		reply{429, map[string]string{"Retry-After": "99999999999999999999"}},
		reply{503, map[string]string{"Retry-After": "-5"}})
	synctest.Test(t, func(t *testing.T) {
		c, _ := client(t, retrying, httplimit.WithMaxRetryAfter(7*time.Second))
		start := time.Now()
		resp, _ := get(t, c, s.srv.URL)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if el := time.Since(start); el < 7*time.Second || el > 7300*time.Millisecond {
			t.Fatalf("took %v, want the 7 s cap plus jitter", el)
		}
	})
}

// Other callers wait out a hint that one caller received.
func TestHintPausesOtherRequests(t *testing.T) {
	s := newScript(t, reply{429, map[string]string{"Retry-After": "10"}})
	synctest.Test(t, func(t *testing.T) {
		c, _ := client(t, gate.Config{Limit: bucket.Limit{Capacity: 10, Rate: 10}, MaxQueue: 10})
		start := time.Now()
		get(t, c, s.srv.URL) // 429, no retries configured: returned, gate paused
		var wg sync.WaitGroup
		var early atomic.Int64
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, _ := get(t, c, s.srv.URL)
				if resp.StatusCode != 200 || time.Since(start) < 10*time.Second {
					early.Add(1)
				}
			}()
		}
		wg.Wait()
		if early.Load() != 0 {
			t.Fatalf("%d requests went out during the pause", early.Load())
		}
	})
}

func TestGateRefusalIsTheError(t *testing.T) {
	s := newScript(t)
	synctest.Test(t, func(t *testing.T) {
		c, _ := client(t, gate.Config{Limit: bucket.Limit{Capacity: 1, Rate: 0.1}}, httplimit.WithCost(func(r *http.Request) int64 {
			if r.Method == http.MethodDelete {
				return 2
			}
			return 1
		}))
		get(t, c, s.srv.URL)
		if _, err := c.Get(s.srv.URL); !errors.Is(err, sluice.ErrQueueFull) {
			t.Fatalf("err %v", err)
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, s.srv.URL, nil)
		if _, err := c.Do(req); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			t.Fatalf("err %v", err)
		}
		if s.requests() != 1 {
			t.Fatalf("refused requests reached the server: %d", s.requests())
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"0": 0, "120": 2 * time.Minute, " 7 ": 7 * time.Second,
		"Sun, 29 Nov 2026 12:00:30 GMT":  30 * time.Second,
		"Sunday, 29-Nov-26 12:01:00 GMT": time.Minute,
		"Sun Nov 29 12:00:05 2026":       5 * time.Second,
		"Sun, 29 Nov 2026 11:00:00 GMT":  0, // in the past
	} {
		if got, ok := httplimit.ParseRetryAfter(v, now); !ok || got != want {
			t.Errorf("%q: %v %v, want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "1.5", "soon", "0x10", "12s", "Sun, 99 Nov 2026 12:00:30 GMT"} {
		if got, ok := httplimit.ParseRetryAfter(v, now); ok {
			t.Errorf("%q accepted as %v", v, got)
		}
	}
}

func TestParseRateLimitField(t *testing.T) {
	items, ok := httplimit.ParseRateLimitField(`"default";r=0;t=30, daily;r=12;t=3600;x="a,b;c"`)
	if !ok || len(items) != 2 || items[0].Policy != "default" || items[0].Params["t"] != "30" ||
		items[1].Policy != "daily" || items[1].Params["x"] != "a,b;c" {
		t.Fatalf("%+v %v", items, ok)
	}
	for _, v := range []string{"", ",", `"unterminated;r=0`, `a b;r=1`, `"x";=3`} {
		if items, ok := httplimit.ParseRateLimitField(v); ok {
			t.Errorf("%q parsed as %+v", v, items)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "Sun, 29 Nov 2026 12:00:30 GMT", "-1", "99999999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d, ok := httplimit.ParseRetryAfter(v, now); ok && d < 0 {
			t.Fatalf("%q gave a negative wait %v", v, d)
		}
	})
}

func FuzzRetryHint(f *testing.F) {
	f.Add("3", `"default";r=0;t=30`, "0", "5")
	f.Add("", `"a";r=0;t=99999999999999999, "b";r=1`, "x", "")
	f.Fuzz(func(t *testing.T, retryAfter, rateLimit, remaining, reset string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("RateLimit", rateLimit)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", reset)
		d, ok := httplimit.RetryHint(h, time.Now(), time.Hour)
		if ok && (d < 0 || d > time.Hour) {
			t.Fatalf("hint %v outside [0, 1h]", d)
		}
		httplimit.ParseRateLimitField(rateLimit)
	})
}

// Every answer's own rate-limit headers adjust the gate: budgets the
// provider counts lower are lowered (never raised), and one with nothing
// left and a reset is paused until then.
func TestTransportFollowsProviderHeaders(t *testing.T) {
	s := newScript(t,
		reply{200, map[string]string{"x-ratelimit-remaining-requests": "3", "x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "1s"}},
		reply{200, map[string]string{"x-ratelimit-remaining-requests": "400", "x-ratelimit-remaining-tokens": "29000"}},
		reply{200, map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m0s", "x-ratelimit-limit-tokens": "30000"}},
	)
	g, err := gate.New(gate.Config{Limit: bucket.PerMinute(500), MaxQueue: 10, MaxWait: time.Second,
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.PerMinute(30000)}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: httplimit.NewTransport(nil, g)}
	get := func() {
		t.Helper()
		resp, err := c.Get(s.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get()
	st := g.Stats()
	// (the buckets refill meanwhile: 500 tokens and 8.3 requests a second)
	if st.Tokens > 4 || st.Dimensions[0].Tokens > 150 || st.Dimensions[0].Tokens < 99 {
		t.Fatalf("lowered to the provider's figures (3 requests, 100 tokens): %+v", st)
	}
	get() // the provider says more than the gate holds: nothing is raised
	if st2 := g.Stats(); st2.Tokens > 10 || st2.Dimensions[0].Tokens > 1000 {
		t.Fatalf("raised towards the provider's 400 requests and 29000 tokens: %+v after %+v", st2, st)
	}
	get() // no tokens left for a minute: the tokens dimension pauses
	err = g.Do(context.Background(), 1, func(context.Context) error { return nil }, gate.Charge("tokens", 1))
	if !errors.Is(err, sluice.ErrWaitTooLong) {
		t.Fatalf("a call charging tokens during the provider's reset: %v", err)
	}
	if err := g.Do(context.Background(), 1, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("a call not charging tokens: %v", err)
	}
}

// With a token estimate, a request reserves its tokens, holds its slot
// until its body is closed, and is settled with the usage its answer
// reports (UsageFromJSON leaves the body readable); a retried 429 is
// settled at 0 tokens.
func TestTransportTokenEstimateAndUsage(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(429)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "x", "usage": {"prompt_tokens": 150, "completion_tokens": 50}}`)
	}))
	defer srv.Close()
	g, err := gate.New(gate.Config{Limit: bucket.PerSecond(100), MaxInFlight: 1, MaxQueue: 5, MaxWait: 5 * time.Second,
		Retry:      gate.Retry{MaxAttempts: 2},
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: 10000, Rate: 0.001}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: httplimit.NewTransport(nil, g,
		httplimit.WithTokenEstimate(func(*http.Request) int64 { return 1000 }),
		httplimit.WithTokenUsage(httplimit.UsageFromJSON))}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if tk := g.Stats().Dimensions[0].Tokens; tk < 9799.9 || tk > 9800.1 {
		t.Fatalf("settled to the 200 tokens used: %v left", tk)
	}
	if g.Stats().InFlight != 1 {
		t.Fatalf("the slot is held until the body is closed: %+v", g.Stats())
	}
	second := make(chan error, 1)
	go func() {
		r, err := c.Get(srv.URL)
		if err == nil {
			r.Body.Close()
		}
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("a second request got the only slot while the first body was open: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte(`"completion_tokens": 50`)) {
		t.Fatalf("the caller reads the whole body: %q", b)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	// the third answer is a 429 (retried: settled at 0), the retry a 200
	r3, err := c.Get(srv.URL)
	if err != nil || r3.StatusCode != 200 {
		t.Fatalf("%v %v", r3, err)
	}
	r3.Body.Close()
	if tk := g.Stats().Dimensions[0].Tokens; tk < 9399.9 || tk > 9400.1 || calls.Load() != 4 {
		t.Fatalf("after 3 answered calls of 200 tokens and one 429: %v tokens left, %d calls", tk, calls.Load())
	}
	if g.Stats().InFlight != 0 {
		t.Fatalf("slots left: %+v", g.Stats())
	}
}

func TestUsageFromJSON(t *testing.T) {
	for body, want := range map[string]int64{
		`{"usage": {"total_tokens": 42, "prompt_tokens": 1}}`:      42,
		`{"usage": {"prompt_tokens": 10, "completion_tokens": 5}}`: 15,
		`{"usage": {"input_tokens": 100, "output_tokens": 7}}`:     107,
		`{"usage": {"input_tokens": -5, "output_tokens": 7}}`:      7,
		`{"no": "usage"}`:                      -1,
		`data: {"usage": {"total_tokens": 1}}`: -1,
		``:                                     -1,
	} {
		res := &http.Response{Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, Body: io.NopCloser(bytes.NewBufferString(body))}
		got, ok := httplimit.UsageFromJSON(res)
		if (want < 0) == ok || (ok && got != want) {
			t.Errorf("%s: %d %v, want %d", body, got, ok, want)
		}
		if rest, _ := io.ReadAll(res.Body); string(rest) != body {
			t.Errorf("%s: the body reads %q after", body, rest)
		}
	}
}

// A streamed answer (text/event-stream) is returned at once with a token
// estimate and UsageFromJSON: its body is not read ahead.
func TestTransportTokenEstimateStreams(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"delta\": \"hi\"}\n\n")
		w.(http.Flusher).Flush()
		<-hold
	}))
	defer srv.Close()
	defer close(hold)
	g, _ := gate.New(gate.Config{Limit: bucket.PerSecond(10), Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.PerSecond(10000)}}})
	c := &http.Client{Transport: httplimit.NewTransport(nil, g,
		httplimit.WithTokenEstimate(func(*http.Request) int64 { return 10 }), httplimit.WithTokenUsage(httplimit.UsageFromJSON))}
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	select {
	case resp := <-got:
		if g.Stats().InFlight != 1 {
			t.Errorf("the streaming answer holds its slot: %+v", g.Stats())
		}
		resp.Body.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("RoundTrip waited for the end of the stream")
	}
}

// With a token estimate, a retried 503 without a hint waits the gate's
// retry backoff and is counted as a retry, as Do's retries are.
func TestTransportTokenEstimateRetriesWithBackoff(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	g, _ := gate.New(gate.Config{Limit: bucket.PerSecond(100), MaxQueue: 5, MaxWait: 5 * time.Second,
		Retry:      gate.Retry{MaxAttempts: 2, BaseDelay: 200 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.PerSecond(10000)}}})
	c := &http.Client{Transport: httplimit.NewTransport(nil, g, httplimit.WithTokenEstimate(func(*http.Request) int64 { return 10 }))}
	start := time.Now()
	resp, err := c.Get(srv.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	if el := time.Since(start); el < 200*time.Millisecond || g.Stats().Retries != 1 || g.Stats().AdmittedRetries != 1 {
		t.Fatalf("the retry after %v, stats %+v: want the 200 ms backoff and one retry counted", el, g.Stats())
	}
}

// With a shared gate, what one worker's transport learns from the
// provider reaches every worker: a lowered budget, a paused dimension and
// a 429's hint, all through the store.
func TestTransportSharedGate(t *testing.T) {
	s := newScript(t,
		reply{200, map[string]string{"x-ratelimit-remaining-tokens": "100"}},
		reply{200, map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m0s"}},
		reply{429, map[string]string{"retry-after-ms": "700"}},
	)
	st := memstore.New()
	defer st.Close()
	cfg := gate.Config{Name: "provider", Store: st, Limit: bucket.PerMinute(500), MaxQueue: 10, MaxWait: 5 * time.Second,
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.PerMinute(30000)}}}
	c1, _ := client(t, cfg)
	_, other := client(t, cfg)
	nop := func(context.Context) error { return nil }
	get(t, c1, s.srv.URL)
	if err := other.Do(context.Background(), 1, nop, gate.Charge("tokens", 1000)); err != nil {
		t.Fatal(err)
	}
	// 100 tokens left, and 500 a second: 1000 took about 1.8 s of refill.
	if st := other.Stats(); st.Dimensions[0].Tokens > 0 {
		t.Fatalf("rule: a shared budget lowered by one worker's answer is lowered for all: %+v", st)
	}
	get(t, c1, s.srv.URL) // no tokens left for a minute
	if err := other.Do(context.Background(), 1, nop, gate.Charge("tokens", 1)); !errors.Is(err, sluice.ErrWaitTooLong) {
		t.Fatalf("rule: a dimension paused by one worker's answer is paused for all (beyond MaxWait): %v", err)
	}
	start := time.Now()
	get(t, c1, s.srv.URL) // 429, retry-after-ms 700: the whole gate pauses
	if err := other.Do(context.Background(), 1, nop); err != nil || time.Since(start) < 600*time.Millisecond {
		t.Fatalf("rule: a 429's hint seen by one worker pauses every worker: %v after %v", err, time.Since(start))
	}
}

// RetryHint takes the longest of the hints an answer carries.
func TestRetryHintLongest(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		h    map[string]string
		want time.Duration
	}{
		{map[string]string{"retry-after-ms": "700"}, 700 * time.Millisecond},
		{map[string]string{"Retry-After": "1", "retry-after-ms": "2500"}, 2500 * time.Millisecond},
		{map[string]string{"Retry-After": "2", "retry-after-ms": "1200"}, 2 * time.Second},
		{map[string]string{"Retry-After": "2", "RateLimit": `"a";r=0;t=5`}, 5 * time.Second},
		{map[string]string{"retry-after-ms": "bogus", "RateLimit-Remaining": "0", "RateLimit-Reset": "3"}, 3 * time.Second},
	} {
		h := http.Header{}
		for k, v := range c.h {
			h.Set(k, v)
		}
		if d, ok := httplimit.RetryHint(h, now, time.Hour); !ok || d != c.want {
			t.Errorf("%v: %v %v, want %v", c.h, d, ok, c.want)
		}
	}
	if _, ok := httplimit.RetryHint(http.Header{"Retry-After-Ms": {"-1"}}, now, time.Hour); ok {
		t.Error("a negative retry-after-ms is no hint")
	}
}
