// Tests of the transport's in-flight slot held until a streamed answer's body ends, on every path.
package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/httplimit"
)

// streamer is a real HTTP server streaming text/event-stream answers: each
// request gets one event at once, then its stream stays open until finish
// is closed (the stream then ends) or the client goes away. The first
// refuse requests are answered 429 with Retry-After: 0.
type streamer struct {
	srv     *httptest.Server
	arrived chan string // each request's path, as it arrives
	finish  chan struct{}
	refuse  atomic.Int64
}

func newStreamer(t *testing.T) *streamer {
	s := &streamer{arrived: make(chan string, 16), finish: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.arrived <- r.URL.Path
		if s.refuse.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if r.Method == http.MethodHead {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"delta\": \"hi\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-s.finish:
			io.WriteString(w, "data: [DONE]\n\n")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		select {
		case <-s.finish:
		default:
			close(s.finish)
		}
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// expectArrival waits for a request to reach the server.
func (s *streamer) expectArrival(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.arrived:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the server", what)
	}
}

// expectNoArrival checks that no request reaches the server for a while.
func (s *streamer) expectNoArrival(t *testing.T, what string) {
	t.Helper()
	select {
	case p := <-s.arrived:
		t.Fatalf("%s (%s) was sent while the only slot was held", what, p)
	case <-time.After(300 * time.Millisecond):
	}
}

// transportModes are the transport's paths: without a token estimate (the
// calls run in gate.Do), with one, and with one settled by usage.
var transportModes = []struct {
	name string
	opts []httplimit.TransportOption
}{
	{"plain", nil},
	{"estimate", []httplimit.TransportOption{httplimit.WithTokenEstimate(func(*http.Request) int64 { return 10 })}},
	{"estimate+usage", []httplimit.TransportOption{httplimit.WithTokenEstimate(func(*http.Request) int64 { return 10 }),
		httplimit.WithTokenUsage(httplimit.UsageFromJSON)}},
}

// oneSlot is a gate with a single in-flight slot and a waiting room.
func oneSlot(t *testing.T, opts ...httplimit.TransportOption) (*http.Client, *gate.Gate) {
	t.Helper()
	g, err := gate.New(gate.Config{Limit: bucket.PerSecond(1000), MaxInFlight: 1, MaxQueue: 8, MaxWait: 30 * time.Second,
		Retry:      gate.Retry{MaxAttempts: 2},
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.PerSecond(100000)}}})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: httplimit.NewTransport(base, g, opts...)}, g
}

// With MaxInFlight 1, a second call is not sent while the first answer's
// stream is open, on every path (with and without an estimate, after a
// retried 429), and goes out once the first body ends: closed while
// streaming, read to EOF and never closed, or closed without being read.
func TestTransportHoldsSlotWhileStreaming(t *testing.T) {
	ends := map[string]func(s *streamer, body io.ReadCloser) error{
		"closed": func(_ *streamer, body io.ReadCloser) error { return body.Close() },
		"read to EOF": func(s *streamer, body io.ReadCloser) error {
			close(s.finish)
			b, err := io.ReadAll(body) // (no Close)
			if err == nil && !strings.HasSuffix(string(b), "[DONE]\n\n") {
				err = errors.New("the stream read " + string(b))
			}
			return err
		},
		"closed unread": func(_ *streamer, body io.ReadCloser) error { return body.Close() },
	}
	for _, mode := range transportModes {
		for endName, end := range ends {
			for _, retried := range []bool{false, true} {
				name := mode.name + "/" + endName
				if retried {
					name += "/after a retried 429"
				}
				t.Run(name, func(t *testing.T) {
					s := newStreamer(t)
					c, g := oneSlot(t, mode.opts...)
					if retried {
						s.refuse.Store(1)
					}
					first, err := c.Get(s.srv.URL + "/first")
					if err != nil {
						t.Fatal(err)
					}
					s.expectArrival(t, "the first call")
					if retried {
						s.expectArrival(t, "the first call's retry")
					}
					if endName != "closed unread" {
						buf := make([]byte, 8)
						if _, err := io.ReadFull(first.Body, buf); err != nil || string(buf) != "data: {\"" {
							t.Fatalf("the stream's first event: %q %v", buf, err)
						}
					}
					if st := g.Stats(); st.InFlight != 1 {
						t.Fatalf("the open stream holds its slot: %+v", st)
					}
					second := make(chan error, 1)
					go func() {
						res, err := c.Get(s.srv.URL + "/second")
						if err == nil {
							err = res.Body.Close()
						}
						second <- err
					}()
					s.expectNoArrival(t, "the second call")
					if err := end(s, first.Body); err != nil {
						t.Fatal(err)
					}
					s.expectArrival(t, "the second call, once the first body ended")
					if endName != "read to EOF" {
						close(s.finish) // (the second stream ends at once)
					}
					select {
					case err := <-second:
						if err != nil {
							t.Fatal(err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("the second call never returned")
					}
					if st := g.Stats(); st.InFlight != 0 {
						t.Fatalf("slots left after both bodies ended: %+v", st)
					}
				})
			}
		}
	}
}

// A body's end frees the slot before Close (or the last Read) returns; an
// answer without a body frees it before RoundTrip returns; a request whose
// context ends frees it though its body is neither read nor closed.
func TestTransportSlotFreedAtBodyEnd(t *testing.T) {
	for _, mode := range transportModes {
		t.Run(mode.name, func(t *testing.T) {
			s := newStreamer(t)
			c, g := oneSlot(t, mode.opts...)
			res, err := c.Get(s.srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if st := g.Stats(); st.InFlight != 0 {
				t.Fatalf("after Close returned: %+v", st)
			}
			req, _ := http.NewRequest(http.MethodHead, s.srv.URL, nil)
			if res, err = c.Do(req); err != nil {
				t.Fatal(err)
			}
			if st := g.Stats(); st.InFlight != 0 || res.Body != http.NoBody {
				t.Fatalf("a HEAD answer (body %T) holds no slot: %+v", res.Body, st)
			}
			ctx, cancel := context.WithCancel(context.Background())
			req, _ = http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL, nil)
			if _, err = c.Do(req); err != nil {
				t.Fatal(err)
			}
			if st := g.Stats(); st.InFlight != 1 {
				t.Fatalf("the open stream holds its slot: %+v", st)
			}
			cancel()
			deadline := time.Now().Add(10 * time.Second)
			for g.Stats().InFlight != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the slot of a cancelled request, its body never closed, was never freed")
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// An attempt that gets no answer frees its slot: a connection refused, and
// a panic of the base transport (re-raised on the caller's goroutine).
func TestTransportSlotFreedWithoutAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	for _, mode := range transportModes {
		t.Run(mode.name, func(t *testing.T) {
			c, g := oneSlot(t, mode.opts...)
			if _, err := c.Get(dead); err == nil {
				t.Fatal("a refused connection answered")
			}
			if st := g.Stats(); st.InFlight != 0 {
				t.Fatalf("after a refused connection: %+v", st)
			}
			rt := httplimit.NewTransport(panicking{}, g, mode.opts...)
			func() {
				defer func() {
					if p := recover(); p != "base panicked" {
						t.Fatalf("recovered %v, want the base transport's panic", p)
					}
				}()
				req, _ := http.NewRequest(http.MethodGet, dead, nil)
				rt.RoundTrip(req)
			}()
			if st := g.Stats(); st.InFlight != 0 {
				t.Fatalf("after a panic of base: %+v", st)
			}
		})
	}
}

// panicking is a base transport that panics (the failure injected).
type panicking struct{}

func (panicking) RoundTrip(*http.Request) (*http.Response, error) { panic("base panicked") }
