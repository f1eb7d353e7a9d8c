// Command adaptive measures gate.Config.Adaptive (a ceiling that learns,
// AIMD) against a fake provider that has a hidden capacity and sends no
// rate-limit headers: it answers 429 (no Retry-After, no RateLimit
// fields) to every request beyond its own token bucket (golang.org/x/time/rate,
// not sluice's), whose rate changes once, at the middle of the run.
// Worker processes call it as fast as they can through
// httplimit.NewTransport and one gate shared through Redis. Two rows:
//
//   - adaptive: the gate with Adaptive{Min, Max, Decrease, Increase,
//     Cooldown}: its ceiling, kept in Redis, is lowered by every worker's
//     429 (once per cooldown for the fleet) and climbs back together;
//   - fixed: the same gate at Max without Adaptive, for comparison;
//   - service: Python worker processes (worker.py, the client of
//     clients/python) checking a real sluice serve on the same Redis whose
//     limit is adaptive with the same parameters, each 429 reported with
//     report_response (POST /v1/feedback "overloaded").
//
// For each row it reports the share of calls answered 429, the share of the
// provider's capacity used once converged (from -settle seconds after the
// start to the change, and from the change plus -follow seconds to the
// end), and how long after the change the fleet took to follow it: the
// first second after it that starts a 3-second window whose calls
// answered 200 are at least 85 % of the new capacity (a rise), or hold at
// most 3 % 429s (a fall).
//
//	cd bench && GOWORK=off go run ./adaptive [-seconds 40] [-workers 4] [-before 100] [-after 150] [-rows adaptive,fixed,service]
//
// The service row needs python3 and builds sluice unless $SLUICE_BIN
// names it.
//
// It starts a redis-server of its own on a free loopback port (or uses
// -redis host:port) and stops it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// workerEnv marks a process started as a worker (by Run, of itself).
const workerEnv = "ADAPTIVE_WORKER"

// Config is a run.
type Config struct {
	Seconds       float64 // the adaptive row's length; the change is at its middle
	FixedSeconds  float64 // the fixed row's length (0: Seconds)
	Workers       int
	Concurrency   int     // calls in flight per worker
	Before, After float64 // the provider's capacity, requests per second, before and after the change
	Max, Min      float64 // the gate's ceiling's bounds
	Decrease      float64
	Increase      float64 // per second
	Cooldown      time.Duration
	Settle        float64 // seconds from the start not counted as converged
	Follow        float64 // seconds from the change not counted as converged
	Latency       time.Duration
	Redis         string
	Rows          []string // of "adaptive" (Go gates), "fixed" (Go gates without Adaptive), "service" (Python clients of sluice serve)
}

// Row is one row's figures.
type Row struct {
	Name            string
	OK, Refused     int64      // 200s and 429s
	PerSecond       [][2]int64 // per second of the run: 200s, 429s
	ConvergedBefore float64    // share of the capacity used, settled, before the change
	ConvergedAfter  float64    // and after it, followed
	Refused429      float64    // share of calls answered 429, the whole run
	SteadyRefused   float64    // the same from -settle on
	FollowSeconds   float64    // -1: never
}

func main() {
	if os.Getenv(workerEnv) == "1" {
		if err := workerMain(os.Args[1:], os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	cfg := Defaults()
	flag.Float64Var(&cfg.Seconds, "seconds", 40, "length of the adaptive row (the capacity changes at its middle)")
	flag.Float64Var(&cfg.FixedSeconds, "fixed-seconds", 0, "length of the fixed row (0: -seconds)")
	flag.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes")
	flag.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "concurrent calls per worker")
	flag.Float64Var(&cfg.Before, "before", cfg.Before, "the provider's capacity (requests per second) before the change")
	flag.Float64Var(&cfg.After, "after", cfg.After, "and after it")
	flag.StringVar(&cfg.Redis, "redis", "", "host:port of a Redis to share through (default: start one)")
	names := flag.String("rows", strings.Join(cfg.Rows, ","), "rows to run: adaptive, fixed, service")
	flag.Parse()
	cfg.Rows = strings.Split(*names, ",")
	rows, err := Run(cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(Table(cfg, rows))
}

// Defaults are the run BENCHMARKS.md reports (but its length).
func Defaults() Config {
	return Config{Seconds: 40, Workers: 4, Concurrency: 8, Before: 100, After: 150, Max: 200, Min: 5,
		Decrease: 0.8, Increase: 8, Cooldown: time.Second, Settle: 6, Follow: 10, Latency: 5 * time.Millisecond,
		Rows: []string{"adaptive", "fixed", "service"}}
}

// Run runs cfg.Rows.
func Run(cfg Config) ([]Row, error) {
	addr := cfg.Redis
	if addr == "" {
		srv, err := redistest.Start()
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		addr = srv.Addr
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var rows []Row
	for i, name := range cfg.Rows {
		secs := cfg.Seconds
		if name == "fixed" && cfg.FixedSeconds > 0 {
			secs = cfg.FixedSeconds
		}
		r, err := runRow(cfg, exe, addr, name, secs, fmt.Sprintf("adaptive-%d-%d:", time.Now().UnixNano(), i))
		if err != nil {
			return nil, fmt.Errorf("row %s: %w", name, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// provider is the fake provider: a token bucket of a hidden rate (burst: a
// fifth of a second's worth), 429 without headers beyond it.
type provider struct {
	start   time.Time
	latency time.Duration
	mu      sync.Mutex
	lim     *rate.Limiter
	counts  [][2]int64
}

func newProvider(capacity float64, latency time.Duration) *provider {
	return &provider{start: time.Now(), latency: latency, lim: rate.NewLimiter(rate.Limit(capacity), max(int(capacity/5), 1))}
}

func (p *provider) set(capacity float64) {
	p.mu.Lock()
	p.lim.SetLimit(rate.Limit(capacity))
	p.lim.SetBurst(max(int(capacity/5), 1))
	p.mu.Unlock()
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	ok := p.lim.Allow()
	sec := int(time.Since(p.start) / time.Second)
	for len(p.counts) <= sec {
		p.counts = append(p.counts, [2]int64{})
	}
	if ok {
		p.counts[sec][0]++
	} else {
		p.counts[sec][1]++
	}
	p.mu.Unlock()
	time.Sleep(p.latency)
	if !ok {
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"overloaded"}}`)
		return
	}
	io.WriteString(w, `{"ok":true}`)
}

func runRow(cfg Config, exe, redisAddr, name string, secs float64, prefix string) (Row, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Row{}, err
	}
	p := newProvider(cfg.Before, cfg.Latency)
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	defer srv.Close()
	change := time.Duration(secs / 2 * float64(time.Second))
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers)
	var started atomic.Int64
	var service *sluiceServe
	if name == "service" {
		var err error
		if service, err = startService(cfg, redisAddr, prefix); err != nil {
			return Row{}, err
		}
		defer service.stop()
	}
	for w := range cfg.Workers {
		var cmd *exec.Cmd
		if service != nil {
			cmd = service.worker(cfg, "http://"+ln.Addr().String(), secs)
		} else {
			cmd = exec.Command(exe, "-provider", "http://"+ln.Addr().String(), "-redis", redisAddr, "-prefix", prefix,
				"-adaptive="+fmt.Sprint(name == "adaptive"), "-seconds", fmt.Sprint(secs),
				"-concurrency", fmt.Sprint(cfg.Concurrency), "-max", fmt.Sprint(cfg.Max), "-min", fmt.Sprint(cfg.Min),
				"-decrease", fmt.Sprint(cfg.Decrease), "-increase", fmt.Sprint(cfg.Increase), "-cooldown", cfg.Cooldown.String())
			cmd.Env = append(os.Environ(), workerEnv+"=1")
		}
		wg.Go(func() {
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			started.Add(1)
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("worker %d: %v: %s", w, err, stderr.String())
			}
		})
	}
	p.mu.Lock()
	p.start = time.Now() // (the workers start within milliseconds)
	p.counts = nil
	p.mu.Unlock()
	time.AfterFunc(change, func() { p.set(cfg.After) })
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Row{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := Row{Name: name, PerSecond: p.counts}
	n := min(len(r.PerSecond), int(secs)) // (the last partial second left out)
	r.PerSecond = r.PerSecond[:n]
	half := int(secs / 2)
	var steadyOK, steadyNo int64
	sum := func(from, to int) (ok, no int64) {
		for s := max(from, 0); s < min(to, n); s++ {
			ok += r.PerSecond[s][0]
			no += r.PerSecond[s][1]
		}
		return ok, no
	}
	r.OK, r.Refused = sum(0, n)
	r.Refused429 = float64(r.Refused) / float64(max(r.OK+r.Refused, 1))
	settle, follow := int(cfg.Settle), int(cfg.Follow)
	ok1, no1 := sum(settle, half)
	ok2, no2 := sum(half+follow, n)
	steadyOK, steadyNo = ok1+ok2, no1+no2
	r.SteadyRefused = float64(steadyNo) / float64(max(steadyOK+steadyNo, 1))
	r.ConvergedBefore = float64(ok1) / (cfg.Before * float64(max(half-settle, 1)))
	r.ConvergedAfter = float64(ok2) / (cfg.After * float64(max(n-half-follow, 1)))
	r.FollowSeconds = -1
	for s := half; s+3 <= n; s++ {
		ok, no := sum(s, s+3)
		if cfg.After > cfg.Before && float64(ok) >= 0.85*cfg.After*3 ||
			cfg.After <= cfg.Before && float64(no) <= 0.03*float64(ok+no) {
			r.FollowSeconds = float64(s - half)
			break
		}
	}
	return r, nil
}

// Table renders rows as BENCHMARKS.md shows them.
func Table(cfg Config, rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider capacity %v/s, then %v/s from the middle of the run; %d workers x %d calls in flight; gate ceiling %v..%v/s, x%v per overload, +%v/s, cooldown %v\n",
		cfg.Before, cfg.After, cfg.Workers, cfg.Concurrency, cfg.Min, cfg.Max, cfg.Decrease, cfg.Increase, cfg.Cooldown)
	fmt.Fprintf(&b, "%-9s %7s %6s %8s %10s %11s %11s %9s\n", "row", "200s", "429s", "429 %", "steady 429", "used before", "used after", "follow s")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-9s %7d %6d %7.2f%% %9.2f%% %10.1f%% %10.1f%% %9v\n", r.Name, r.OK, r.Refused, r.Refused429*100, r.SteadyRefused*100,
			r.ConvergedBefore*100, r.ConvergedAfter*100, r.FollowSeconds)
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "%s per second (200s/429s):", r.Name)
		for _, c := range r.PerSecond {
			fmt.Fprintf(&b, " %d/%d", c[0], c[1])
		}
		b.WriteString("\n")
	}
	return b.String()
}

func workerMain(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	providerURL := fs.String("provider", "", "")
	redisAddr := fs.String("redis", "", "")
	prefix := fs.String("prefix", "", "")
	adaptive := fs.Bool("adaptive", false, "")
	seconds := fs.Float64("seconds", 0, "")
	conc := fs.Int("concurrency", 1, "")
	maxRate := fs.Float64("max", 0, "")
	minRate := fs.Float64("min", 0, "")
	decrease := fs.Float64("decrease", 0, "")
	increase := fs.Float64("increase", 0, "")
	cooldown := fs.Duration("cooldown", 0, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	end := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	st, err := redisstore.Open("redis://"+*redisAddr, redisstore.WithPrefix(*prefix))
	if err != nil {
		return err
	}
	defer st.Close()
	cfg := gate.Config{
		Name:     "provider",
		Limit:    bucket.Limit{Capacity: 2, Rate: *maxRate},
		MaxQueue: *conc,
		MaxWait:  10 * time.Second,
		Store:    st,
	}
	if *adaptive {
		cfg.Adaptive = &gate.Adaptive{Min: *minRate, Max: *maxRate, Decrease: *decrease, Increase: *increase, Cooldown: *cooldown}
	}
	g, err := gate.New(cfg)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: httplimit.NewTransport(nil, g)}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var wg sync.WaitGroup
	for range *conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "POST", *providerURL+"/v1/messages", strings.NewReader(`{"model":"m"}`))
				res, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						time.Sleep(50 * time.Millisecond)
					}
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
	wg.Wait()
	return json.NewEncoder(out).Encode(map[string]float64{"refill": g.Refill()})
}
