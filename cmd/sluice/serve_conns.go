// Serving and stopping: the servers, their connections, the drain.

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/reflection"
)

// running is what serves: the HTTP server, the gRPC server (nil without
// --grpc) and the store, and the channel where a server that stops
// serving reports.
type running struct {
	st    store.Store
	hs    *http.Server
	fresh *freshConns
	as    *http.Server // --auth-listen's; nil without
	afrsh *freshConns
	gs    *grpc.Server
	gln   *quietListener
	errc  chan error
}

// stopAll stops both servers at once, then the store (a server stopped
// serving on its own).
func (r *running) stopAll() {
	r.hs.Close()
	if r.as != nil {
		r.as.Close()
	}
	if r.gs != nil {
		r.gln.closeAll()
		r.gs.Stop()
	}
	r.st.Close()
}

// drain stops on a signal: both servers drain their in-flight requests
// (up to drainTimeout), then the store closes, last: nothing can call it
// any more.
func (r *running) drain(log *slog.Logger, sig os.Signal) error {
	log.Info("shutting down: draining in-flight requests", "signal", sig.String())
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	var wg sync.WaitGroup
	var httpErr, grpcErr error
	wg.Go(func() { httpErr = drainHTTP(ctx, r.hs, r.fresh) })
	var authErr error
	if r.as != nil {
		wg.Go(func() { authErr = drainHTTP(ctx, r.as, r.afrsh) })
	}
	if r.gs != nil {
		wg.Go(func() { grpcErr = drainGRPC(ctx, r.gs, r.gln) })
	}
	wg.Wait()
	cancel()
	r.st.Close()
	if err := errors.Join(httpErr, grpcErr, authErr); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// satAdd is a+b, at most the largest duration.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// idleGrace is how long the drain leaves a keep-alive connection idle
// before closing it: a busy client's next request, which may be on its way
// as the drain starts, is read and answered (with Connection: close)
// rather than cut off.
const idleGrace = 250 * time.Millisecond

// freshConns tracks an HTTP server's connections for the drain: m holds
// those that have not yet sent a whole request (http.StateNew:
// http.Server.Shutdown waits up to 5 s for those, so the drain closes them
// itself), conns every open one with its state and since when. ln is the
// server's listener, closed when the drain starts.
type freshConns struct {
	mu       sync.Mutex
	m        map[net.Conn]struct{}
	conns    map[net.Conn]connState
	ln       net.Listener
	draining atomic.Bool
}

// connState is a connection's last state and when it entered it.
type connState struct {
	state http.ConnState
	since time.Time
}

// track is the http.Server's ConnState hook.
func (f *freshConns) track(c net.Conn, s http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == http.StateNew {
		f.m[c] = struct{}{}
	} else {
		delete(f.m, c)
	}
	if f.conns == nil {
		f.conns = map[net.Conn]connState{}
	}
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(f.conns, c)
	default:
		f.conns[c] = connState{s, time.Now()}
	}
}

// closing is h, with the answer to every request that arrives once the
// drain has started carrying Connection: close (net/http then closes the
// connection after it, and the client knows not to send another request
// on it). A request held since before the drain is answered without it;
// its connection is closed once idle for idleGrace.
func (f *freshConns) closing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// closeQuiet closes every connection that has sent no whole request, and
// every one idle for idleGrace since the later of from and its last
// answer; it reports how many connections remain open.
func (f *freshConns) closeQuiet(from time.Time) int {
	now := time.Now()
	f.mu.Lock()
	var quiet []net.Conn
	for c := range f.m {
		quiet = append(quiet, c)
		delete(f.m, c)
		delete(f.conns, c)
	}
	for c, st := range f.conns {
		since := st.since
		if since.Before(from) {
			since = from
		}
		if st.state == http.StateIdle && now.Sub(since) >= idleGrace {
			quiet = append(quiet, c)
			delete(f.conns, c)
		}
	}
	open := len(f.conns)
	f.mu.Unlock()
	for _, c := range quiet {
		c.Close()
	}
	return open
}

// drainHTTP stops hs without dropping a request it has read: it stops
// accepting, answers every request from now on with Connection: close
// (closing its connection after the answer), closes at once the
// connections that have not sent a whole request, and a keep-alive
// connection once it has been idle for idleGrace (a request that arrives
// before is answered). When no connection is left, or ctx ends, hs shuts
// down (what is still open then is closed).
func drainHTTP(ctx context.Context, hs *http.Server, fresh *freshConns) error {
	from := time.Now()
	fresh.draining.Store(true)
	fresh.mu.Lock()
	ln := fresh.ln
	fresh.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for fresh.closeQuiet(from) > 0 {
		select {
		case <-ctx.Done():
			hs.Close()
			return fmt.Errorf("HTTP requests still in flight after %v: %w", drainTimeout, ctx.Err())
		case <-t.C:
		}
	}
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
		return fmt.Errorf("HTTP requests still in flight after %v: %w", drainTimeout, err)
	}
	return nil
}

// drainGRPC stops gs gracefully (GOAWAY; RPCs in flight finish) until ctx
// ends, then closes every connection. Connections that have sent nothing
// are closed at once (grpc waits for their handshake otherwise).
func drainGRPC(ctx context.Context, gs *grpc.Server, ln *quietListener) error {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ln.closeQuiet()
		select {
		case <-done:
			return nil
		case <-t.C:
		case <-ctx.Done():
			ln.closeAll()
			gs.Stop()
			<-done
			return fmt.Errorf("gRPC calls still in flight after %v", drainTimeout)
		}
	}
}

// quietListener tracks the connections it accepts, to close on shutdown
// those that have sent nothing (closeQuiet) or all of them (closeAll).
type quietListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*heardConn]struct{}
}

func newQuietListener(l net.Listener) *quietListener {
	return &quietListener{Listener: l, conns: map[*heardConn]struct{}{}}
}

// Accept implements net.Listener.
func (l *quietListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	hc := &heardConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[hc] = struct{}{}
	l.mu.Unlock()
	return hc, nil
}

func (l *quietListener) closeQuiet() {
	l.mu.Lock()
	var quiet []*heardConn
	for c := range l.conns {
		if !c.heard.Load() {
			quiet = append(quiet, c)
		}
	}
	l.mu.Unlock()
	for _, c := range quiet {
		c.Close()
	}
}

func (l *quietListener) closeAll() {
	l.mu.Lock()
	all := make([]*heardConn, 0, len(l.conns))
	for c := range l.conns {
		all = append(all, c)
	}
	l.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// heardConn records whether its peer has sent anything.
type heardConn struct {
	net.Conn
	l     *quietListener
	heard atomic.Bool
	once  sync.Once
}

// Read implements net.Conn.
func (c *heardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.heard.Store(true)
	}
	return n, err
}

// Close implements net.Conn.
func (c *heardConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// newGRPC is the gRPC server of Envoy's RateLimitService (from the policy
// or Envoy's configuration), with the gRPC health service and reflection.
func newGRPC(svc rls.RateLimitServiceServer, opts ...grpc.ServerOption) *grpc.Server {
	// Calls run on a fixed set of stream workers, long-lived goroutines
	// whose stacks have already grown, instead of a new goroutine per call
	// (grpc-go's default), whose stack grows anew for every call: that
	// growth was about 15 % of the server's CPU at 64 clients, about 1 %
	// with the workers. A call that finds every worker busy still gets a
	// goroutine of its own, so the number bounds no concurrency; it is
	// sized to cover the calls in flight at once, which exceed the cores
	// when a call waits on its store (Redis), but never below 64.
	workers := uint32(max(64, 16*runtime.GOMAXPROCS(0)))
	base := []grpc.ServerOption{grpc.MaxRecvMsgSize(256 << 10), grpc.NumStreamWorkers(workers)}
	gs := grpc.NewServer(append(base, opts...)...)
	rls.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs
}

// serveAuth serves forward-auth alone on ln (--auth-listen), with the HTTP
// server's limits and TLS.
func (r *running) serveAuth(c serveCmd, h http.Handler, ln net.Listener, tlsCfg *tls.Config, log *slog.Logger) {
	r.afrsh = &freshConns{m: map[net.Conn]struct{}{}, ln: ln}
	r.as = c.httpServer(h, tlsCfg, r.afrsh, log)
	go func() {
		if tlsCfg != nil {
			r.errc <- r.as.ServeTLS(ln, "", "")
		} else {
			r.errc <- r.as.Serve(ln)
		}
	}()
}
