package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

var gpt4o = &policy.Prices{Models: map[string]policy.Price{"gpt-4o": {Input: "2.50", Output: "10.00", CachedInput: "1.25"}}}

// longCall is a request whose estimate is $0.10: 20,000 input tokens
// (80,000 bytes of prompt) and max_tokens 5,000.
func longCall(t *testing.T, url string) *http.Request {
	body := `{"model": "gpt-4o", "max_tokens": 5000, "messages": [{"role": "user", "content": "` + strings.Repeat("x", 80_000-75) + `"}]}`
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// WithPrices: 5 concurrent calls with long prompts against a $0.45 gate
// dimension admit $0.40 of estimates; the answers' usage (20,000 input of
// which 10,000 cached, 1,000 output: $0.0475 each) settles the spend
// exactly. In process and with a shared gate.
func TestTransportPrices(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "process", true: "shared"}[shared], func(t *testing.T) {
			var arrived sync.WaitGroup
			arrived.Add(4)
			var once sync.Once
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				arrived.Done()
				<-release // (every admitted call in flight at once)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"model": "gpt-4o-2024-08-06", "usage": {"prompt_tokens": 20000, "completion_tokens": 1000, "prompt_tokens_details": {"cached_tokens": 10000}}}`)
			}))
			defer srv.Close()
			cfg := gate.Config{Name: "spend", Limit: bucket.PerSecond(100), MaxQueue: 10, MaxWait: 200 * time.Millisecond,
				Dimensions: []gate.Dimension{{Name: httplimit.SpendDimension, Limit: bucket.Limit{Capacity: 450_000, Rate: 0.001}}}}
			if shared {
				cfg.Store = memstore.New()
			}
			g, err := gate.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: httplimit.NewTransport(nil, g, httplimit.WithPrices(gpt4o))}
			var mu sync.Mutex
			var ok, refused int
			var wg sync.WaitGroup
			for range 5 {
				wg.Go(func() {
					resp, err := c.Do(longCall(t, srv.URL))
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						refused++
						once.Do(func() { go func() { arrived.Wait(); close(release) }() })
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok++
				})
			}
			wg.Wait()
			if ok != 4 || refused != 1 {
				t.Fatalf("%d admitted, %d refused; want 4 calls of $0.10 within $0.45", ok, refused)
			}
			// What is left is exactly $0.45 - 4 x $0.0475 (the store's
			// state, for a shared gate: a budget of one more micro-dollar
			// is refused, that budget admitted).
			left := int64(450_000 - 4*47_500)
			if _, err := g.Reserve(context.Background(), 1, gate.Charge(httplimit.SpendDimension, left+1)); err == nil {
				t.Fatalf("more than the %d micro-dollars left admitted", left)
			}
			tk, err := g.Reserve(context.Background(), 1, gate.Charge(httplimit.SpendDimension, left))
			if err != nil {
				t.Fatalf("the %d micro-dollars left: %v", left, err)
			}
			tk.Release()
		})
	}
}

func TestTransportPricesUnknownModel(t *testing.T) {
	g, err := gate.New(gate.Config{Limit: bucket.PerSecond(100),
		Dimensions: []gate.Dimension{{Name: httplimit.SpendDimension, Limit: bucket.Limit{Capacity: 450_000, Rate: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: httplimit.NewTransport(nil, g, httplimit.WithPrices(gpt4o),
		httplimit.WithUsageEstimate(func(*http.Request) policy.Usage { return policy.Usage{Model: "gpt-9", InputTokens: 1} }))}
	_, err = c.Post("http://127.0.0.1:1/", "application/json", strings.NewReader(`{}`))
	if !errors.Is(err, policy.ErrUnknownModel) {
		t.Fatalf("%v", err)
	}
}

func TestUsageOf(t *testing.T) {
	for body, want := range map[string]policy.Usage{
		`{"model": "gpt-4o", "usage": {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}}}`:               {Model: "gpt-4o", InputTokens: 10, OutputTokens: 5, CachedInputTokens: 4},
		`{"model": "o3", "usage": {"input_tokens": 10, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 3}}}`:                         {Model: "o3", InputTokens: 10, OutputTokens: 5, CachedInputTokens: 3},
		`{"model": "claude", "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}}`: {Model: "claude", InputTokens: 117, OutputTokens: 5, CachedInputTokens: 100},
		`{"usage": {"prompt_tokens": -3, "completion_tokens": 5}}`:                                                                                 {OutputTokens: 5},
	} {
		res := &http.Response{Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body))}
		got, ok := httplimit.UsageOf(res)
		if !ok || got != want {
			t.Errorf("%s: %+v %v, want %+v", body, got, ok, want)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != body {
			t.Errorf("the body is not put back: %q", b)
		}
	}
	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader("data: {}"))}
	if _, ok := httplimit.UsageOf(res); ok {
		t.Error("a stream read ahead")
	}
}
