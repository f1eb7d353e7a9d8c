// The priority proof (issue 28): one gate shared through Redis with two
// priority classes, 2 worker processes calling the fake provider as
// interactive and 2 flooding it as batch; the provider counts its 429s
// and the requests it allowed, the workers the classes' waits.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redisstore"
)

// PriorityConfig is a run of the priority scenario: the provider allows
// Rate requests a second from a bucket of Burst; the shared gate admits
// Rate a second from GateCapacity (below Burst: the margin for the
// jitter between an admission and its arrival at the provider); batch
// (reserve BatchReserve parts per million, max_queue BatchMaxQueue) is
// attempted at BatchFactor times Rate by 2 processes, interactive (no
// reserve, no bound) at InteractiveShare of Rate by 2 others.
type PriorityConfig struct {
	Seconds          float64
	Rate, Burst      int64
	GateCapacity     int64
	BatchReserve     uint32
	BatchMaxQueue    time.Duration
	BatchFactor      int64
	InteractiveShare float64
	Redis            string // host:port; empty: start a redis-server
}

// classes are the gate's priority classes for c.
func (c PriorityConfig) classes() []policy.Priority {
	return []policy.Priority{{Name: "interactive"}, {Name: "batch", Reserve: c.BatchReserve, MaxQueue: c.BatchMaxQueue, QueueBounded: true}}
}

// ClassResult is one class's outcome, summed over its workers.
type ClassResult struct {
	Attempts, Admitted, Refused, Errors int64
	Waits                               []time.Duration // admitted calls' waits, sorted
}

// Quantile is the q-quantile of the waits (nearest rank; 0 without any).
func (c ClassResult) Quantile(q float64) time.Duration {
	if len(c.Waits) == 0 {
		return 0
	}
	i := int(float64(len(c.Waits))*q+0.999999) - 1
	return c.Waits[min(max(i, 0), len(c.Waits)-1)]
}

// PriorityResult is a run's outcome: the provider's counts and the
// classes'.
type PriorityResult struct {
	OK, Limit          int64   // the provider's 200s and 429s
	Seconds            float64 // its first request to its last
	Allowed, GateAllow float64 // Burst + Rate·Seconds; GateCapacity + Rate·Seconds
	Interactive, Batch ClassResult
	Late               time.Duration // the latest a worker began after the common start
}

// Utilisation is the provider's 200s over its allowance.
func (r PriorityResult) Utilisation() float64 { return float64(r.OK) / r.Allowed }

// priorityReport is what a priority worker prints.
type priorityReport struct {
	Class   string   `json:"class"`
	Counts  [4]int64 `json:"counts"` // attempts, admitted, refused, errors
	WaitsUS []int64  `json:"waits_us"`
	LateUS  int64    `json:"late_us"`
}

// RunPriority runs the priority scenario once against a fresh provider.
func RunPriority(cfg PriorityConfig) (PriorityResult, error) {
	addr := cfg.Redis
	if addr == "" {
		srv, err := redistest.Start()
		if err != nil {
			return PriorityResult{}, err
		}
		defer srv.Stop()
		addr = srv.Addr
	}
	exe, err := os.Executable()
	if err != nil {
		return PriorityResult{}, err
	}
	p := newProvider(cfg.Rate*60, 1<<40)
	p.rburst = cfg.Burst
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return PriorityResult{}, err
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	defer srv.Close()
	start := time.Now().Add(time.Second) // (every worker begins then, started or not)
	prefix := fmt.Sprintf("llmproof-priority-%d:", time.Now().UnixNano())
	var mu sync.Mutex
	var res PriorityResult
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w, class := range []string{"interactive", "batch", "interactive", "batch"} {
		perSecond := float64(cfg.Rate) * cfg.InteractiveShare / 2
		if class == "batch" {
			perSecond = float64(cfg.Rate*cfg.BatchFactor) / 2
		}
		args := []string{"priority", "-provider", "http://" + ln.Addr().String(), "-redis", addr, "-prefix", prefix,
			"-class", class, "-per-second", fmt.Sprint(perSecond), "-start", fmt.Sprint(start.UnixNano()),
			"-seconds", fmt.Sprint(cfg.Seconds), "-capacity", fmt.Sprint(cfg.GateCapacity), "-rate", fmt.Sprint(cfg.Rate),
			"-reserve", fmt.Sprint(cfg.BatchReserve), "-max-queue", cfg.BatchMaxQueue.String()}
		wg.Go(func() {
			cmd := exec.Command(exe, args...)
			cmd.Env = append(os.Environ(), workerEnv+"=1")
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("worker %d (%s): %v: %s", w, class, err, stderr.String())
				return
			}
			var rep priorityReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				errs <- fmt.Errorf("worker %d: %v: %q", w, err, out.String())
				return
			}
			mu.Lock()
			defer mu.Unlock()
			c := &res.Interactive
			if class == "batch" {
				c = &res.Batch
			}
			c.Attempts += rep.Counts[0]
			c.Admitted += rep.Counts[1]
			c.Refused += rep.Counts[2]
			c.Errors += rep.Counts[3]
			for _, us := range rep.WaitsUS {
				c.Waits = append(c.Waits, time.Duration(us)*time.Microsecond)
			}
			res.Late = max(res.Late, time.Duration(rep.LateUS)*time.Microsecond)
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return PriorityResult{}, err
	}
	slices.Sort(res.Interactive.Waits)
	slices.Sort(res.Batch.Waits)
	row := p.row()
	res.OK, res.Limit, res.Seconds = row.OK, row.Limit, row.Seconds
	res.Allowed = float64(cfg.Burst) + float64(cfg.Rate)*row.Seconds
	res.GateAllow = float64(cfg.GateCapacity) + float64(cfg.Rate)*row.Seconds
	return res, nil
}

// PriorityTable renders a run as BENCHMARKS.md shows it.
func PriorityTable(cfg PriorityConfig, r PriorityResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider: %d requests/s from a bucket of %d; gate shared through Redis: %d/s from %d; batch reserve %.1f %%, max_queue %v; %.0f s\n",
		cfg.Rate, cfg.Burst, cfg.Rate, cfg.GateCapacity, float64(cfg.BatchReserve)/1e4, cfg.BatchMaxQueue, cfg.Seconds)
	fmt.Fprintf(&b, "provider: %d 200s, %d 429s over %.2f s; allowance %.0f (gate's %.0f): %.1f %% of the provider's, %.1f %% of the gate's\n",
		r.OK, r.Limit, r.Seconds, r.Allowed, r.GateAllow, r.Utilisation()*100, float64(r.OK)/r.GateAllow*100)
	fmt.Fprintf(&b, "%-12s %9s %9s %9s %7s %9s %9s %9s\n", "class", "attempts", "admitted", "refused", "errors", "p50 wait", "p99 wait", "max wait")
	for _, c := range []struct {
		name string
		c    ClassResult
	}{{"interactive", r.Interactive}, {"batch", r.Batch}} {
		fmt.Fprintf(&b, "%-12s %9d %9d %9d %7d %9s %9s %9s\n", c.name, c.c.Attempts, c.c.Admitted, c.c.Refused, c.c.Errors,
			ms(c.c.Quantile(0.5)), ms(c.c.Quantile(0.99)), ms(c.c.Quantile(1)))
	}
	fmt.Fprintf(&b, "workers began at most %v after the common start\n", r.Late.Round(time.Millisecond))
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }

// priorityWorker is one worker of the priority scenario: calls of one
// class, -per-second of them from -start for -seconds, each through the
// shared gate (waiting as its class allows) and then to the provider.
func priorityWorker(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("priority", flag.ContinueOnError)
	providerURL := fs.String("provider", "", "")
	redisAddr := fs.String("redis", "", "")
	prefix := fs.String("prefix", "", "")
	class := fs.String("class", "", "")
	perSecond := fs.Float64("per-second", 1, "")
	startNS := fs.Int64("start", 0, "")
	seconds := fs.Float64("seconds", 0, "")
	capacity := fs.Int64("capacity", 0, "")
	refill := fs.Int64("rate", 0, "")
	reserve := fs.Uint("reserve", 0, "")
	maxQueue := fs.Duration("max-queue", 0, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := redisstore.Open("redis://"+*redisAddr, redisstore.WithPrefix(*prefix))
	if err != nil {
		return err
	}
	defer st.Close()
	pc := PriorityConfig{BatchReserve: uint32(*reserve), BatchMaxQueue: *maxQueue}
	g, err := gate.New(gate.Config{
		Name:       "provider-key",
		Limit:      bucket.Limit{Capacity: *capacity, Rate: float64(*refill)},
		MaxQueue:   100_000,
		MaxWait:    10 * time.Second,
		Store:      st,
		Priorities: pc.classes(),
	})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	start := time.Unix(0, *startNS)
	end := start.Add(time.Duration(*seconds * float64(time.Second)))
	late := time.Since(start)
	time.Sleep(time.Until(start))
	var attempts, admitted, refused, failed atomic.Int64
	var mu sync.Mutex
	var waits []int64
	call := func() {
		began := time.Now()
		err := g.Do(context.Background(), 1, func(ctx context.Context) error {
			wait := time.Since(began)
			res, err := client.Post(*providerURL+"/v1/chat/completions", "application/json", strings.NewReader(`{"max_tokens":1,"actual":1}`))
			if err != nil {
				return err
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			mu.Lock()
			waits = append(waits, wait.Microseconds())
			mu.Unlock()
			return nil
		}, gate.Priority(*class))
		switch {
		case err == nil:
			admitted.Add(1)
		case errors.Is(err, sluice.ErrWaitTooLong), errors.Is(err, sluice.ErrQueueFull):
			refused.Add(1)
		default:
			failed.Add(1)
			fmt.Fprintln(os.Stderr, err)
		}
	}
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / *perSecond)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(end) {
			break
		}
		time.Sleep(time.Until(at)) // (behind: at once, so the rate holds on average)
		attempts.Add(1)
		wg.Go(call)
	}
	wg.Wait()
	return json.NewEncoder(out).Encode(priorityReport{Class: *class,
		Counts:  [4]int64{attempts.Load(), admitted.Load(), refused.Load(), failed.Load()},
		WaitsUS: waits, LateUS: max(late, 0).Microseconds()})
}
