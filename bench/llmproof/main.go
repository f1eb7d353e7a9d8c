// Command llmproof measures what sharing one provider budget is worth: a
// fake LLM provider on loopback enforces requests per minute and tokens
// per minute per API key with its own token buckets (golang.org/x/time/rate,
// not sluice's), answers 429 beyond them and sends OpenAI's rate-limit
// headers on every answer; worker processes call it as fast as they can,
// each request with a token estimate drawn from 100..1000 and an actual
// usage within ±30% of it. Three rows, one run:
//
//   - shared: one gate shared through Redis (gate.Config.Store) at -share
//     of the provider's limits, by every worker: the provider's 429s and
//     the tokens admitted as a share of what the provider allowed;
//   - full: a gate per worker at the full limits (each worker copying the
//     bucket): the 429s;
//   - quarter: a gate per worker at a quarter of the limits while one
//     worker is idle: the share of the allowance left unused.
//
// Every worker sends through httplimit.NewTransport with WithTokenEstimate
// and WithTokenUsage(UsageFromJSON), so it also follows the provider's
// headers (lowering and pausing its gate).
//
//	cd bench && GOWORK=off go run ./llmproof [-seconds 20] [-workers 4] [-rpm 3000] [-tpm 600000] [-share 0.95]
//
// TestProofPriorities (priority.go) runs the same provider against one
// shared gate with priority classes: 2 processes of interactive calls, 2
// flooding it with batch calls (issue 28).
//
// It starts a redis-server of its own on a free loopback port (or uses
// -redis host:port) and stops it. The provider's allowance over a row is
// its buckets' capacity plus their refill from the row's first request to
// its last.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// workerEnv marks a process started as a worker (by Run, of itself).
const workerEnv = "LLMPROOF_WORKER"

func main() {
	if os.Getenv(workerEnv) == "1" {
		if err := workerMain(os.Args[1:], os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	var cfg Config
	flag.Float64Var(&cfg.Seconds, "seconds", 20, "length of each row")
	flag.IntVar(&cfg.Workers, "workers", 4, "worker processes")
	flag.IntVar(&cfg.Concurrency, "concurrency", 8, "concurrent calls per worker")
	flag.Int64Var(&cfg.RPM, "rpm", 3000, "the provider's requests per minute (its bucket holds one minute's worth)")
	flag.Int64Var(&cfg.TPM, "tpm", 600000, "the provider's tokens per minute (its bucket holds one minute's worth)")
	flag.Float64Var(&cfg.Share, "share", 0.95, "the shared gate's limits as a share of the provider's")
	flag.StringVar(&cfg.Redis, "redis", "", "host:port of a Redis to share through (default: start one)")
	rows := flag.String("rows", "shared,full,quarter", "rows to run")
	flag.Parse()
	cfg.Rows = strings.Split(*rows, ",")
	res, err := Run(cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(Table(cfg, res))
}

// Config is a run of the scenario.
type Config struct {
	Seconds     float64
	Workers     int
	Concurrency int
	RPM, TPM    int64
	Share       float64
	Redis       string   // host:port; empty: start a redis-server
	Rows        []string // "shared", "full", "quarter"
}

// Row is one row's outcome, counted by the provider.
type Row struct {
	Name      string
	OK, Limit int64   // answers 200 and 429
	Tokens    int64   // tokens of the 200s
	Allowed   float64 // tokens the provider would have allowed (capacity + refill over the row)
	Seconds   float64 // first request to last
	Refused   int64   // calls the workers' gates refused (never sent), but for turns past the row's end
	// RedisCalls counts the calls Redis received for the row's decisions,
	// settlements and releases (FCALL, EVALSHA, EVAL, ZREM).
	RedisCalls int64
	// Calls are the gates' store calls by operation (a Take may share
	// one Redis call with others'), summed over the workers.
	Calls Calls
}

// Share is the tokens admitted over the provider's allowance.
func (r Row) Share() float64 { return float64(r.Tokens) / r.Allowed }

// Run runs cfg's rows, each against a fresh provider.
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
		r, err := runRow(cfg, exe, addr, name, fmt.Sprintf("llmproof-%d-%d:", time.Now().UnixNano(), i))
		if err != nil {
			return nil, fmt.Errorf("row %s: %w", name, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func runRow(cfg Config, exe, redisAddr, name, prefix string) (Row, error) {
	share := map[string]float64{"shared": cfg.Share, "full": 1, "quarter": 0.25}[name]
	if share == 0 {
		return Row{}, fmt.Errorf("unknown row %q (shared, full, quarter)", name)
	}
	if _, err := redistest.Do(redisAddr, "CONFIG", "RESETSTAT"); err != nil {
		return Row{}, err
	}
	p := newProvider(cfg.RPM, cfg.TPM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Row{}, err
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	defer srv.Close()
	var wg sync.WaitGroup
	var refused atomic.Int64
	var mu sync.Mutex
	var calls Calls
	errs := make(chan error, cfg.Workers)
	for w := range cfg.Workers {
		args := []string{"-provider", "http://" + ln.Addr().String(), "-redis", redisAddr, "-prefix", prefix,
			"-shared=" + strconv.FormatBool(name == "shared"), "-share", fmt.Sprint(share),
			"-rpm", fmt.Sprint(cfg.RPM), "-tpm", fmt.Sprint(cfg.TPM), "-seconds", fmt.Sprint(cfg.Seconds),
			"-concurrency", fmt.Sprint(cfg.Concurrency), "-seed", fmt.Sprint(w + 1),
			"-idle=" + strconv.FormatBool(name == "quarter" && w == cfg.Workers-1),
			"-in-flight", fmt.Sprint(cfg.Workers * cfg.Concurrency)}
		wg.Go(func() {
			cmd := exec.Command(exe, args...)
			cmd.Env = append(os.Environ(), workerEnv+"=1")
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			if os.Getenv("LLMPROOF_DEBUG") != "" {
				cmd.Stderr = os.Stderr
			}
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("worker %d: %v: %s", w, err, stderr.String())
				return
			}
			var rep report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				errs <- fmt.Errorf("worker %d: %v: %q", w, err, out.String())
				return
			}
			refused.Add(rep.Refused)
			mu.Lock()
			calls.add(rep.Calls)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Row{}, err
	}
	r := p.row()
	r.Name, r.Refused, r.Calls = name, refused.Load(), calls
	cmds, err := redistest.CommandCalls(redisAddr)
	if err != nil {
		return Row{}, err
	}
	// Client calls: the decision scripts (Take, Adjust, AdjustRelease: one
	// call may carry a batch) and slot releases (ZREM); commands run
	// inside scripts, which commandstats counts too, are left out: the
	// ZREMs of the adjust script's releases, which the gates counted.
	r.RedisCalls = cmds["fcall"] + cmds["evalsha"] + cmds["eval"] + cmds["zrem"] - calls.ScriptReleases
	if os.Getenv("LLMPROOF_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "row %s: commandstats %v\n", name, cmds)
	}
	return r, nil
}

// Table renders rows as the table BENCHMARKS.md shows.
func Table(cfg Config, rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider: %d requests/min, %d tokens/min (buckets of one minute's worth); %d workers x %d concurrent calls, %.0f s per row\n",
		cfg.RPM, cfg.TPM, cfg.Workers, cfg.Concurrency, cfg.Seconds)
	fmt.Fprintf(&b, "%-42s %8s %8s %12s %12s %9s %8s %14s\n", "row", "200s", "429s", "tokens", "allowed", "share", "refused", "redis calls/200")
	label := map[string]string{
		"shared":  fmt.Sprintf("one gate shared through Redis at %.0f%%", cfg.Share*100),
		"full":    "a gate per worker at the full limits",
		"quarter": "a gate per worker at 1/4, one worker idle",
	}
	for _, r := range rows {
		perOK := "-"
		if r.RedisCalls > 0 && r.OK > 0 {
			perOK = fmt.Sprintf("%.2f", float64(r.RedisCalls)/float64(r.OK))
		}
		fmt.Fprintf(&b, "%-42s %8d %8d %12d %12.0f %8.1f%% %8d %14s\n", label[r.Name], r.OK, r.Limit, r.Tokens, r.Allowed, r.Share()*100, r.Refused, perOK)
	}
	for _, r := range rows {
		if c := r.Calls; r.OK > 0 && c != (Calls{}) {
			per := func(n int64) float64 { return float64(n) / float64(r.OK) }
			fmt.Fprintf(&b, "  %s: gate store calls per 200: Take %.2f (refused %.2f), AdjustRelease %.2f, Adjust %.2f, Release %.2f, Renew %.2f\n",
				r.Name, per(c.Take), per(c.TakeRefused), per(c.AdjustRelease), per(c.Adjust), per(c.Release), per(c.Renew))
		}
	}
	return b.String()
}

// provider is the fake LLM API: per key (Authorization), a requests and a
// tokens bucket, each holding a minute's worth and refilling evenly, full
// at the key's first request.
type provider struct {
	rpm, tpm int64
	rburst   int64 // the requests bucket's capacity; 0: a minute's worth (priority.go sets it)
	mu       sync.Mutex
	keys     map[string]*[2]*rate.Limiter
	first    time.Time
	last     time.Time
	ok, lim  int64
	tokens   int64
}

func newProvider(rpm, tpm int64) *provider {
	return &provider{rpm: rpm, tpm: tpm, keys: map[string]*[2]*rate.Limiter{}}
}

// ask is a request's body: the caller's max_tokens and (for the fake) the
// usage the answer will report, which the provider charges.
type ask struct {
	MaxTokens int64 `json:"max_tokens"`
	Actual    int64 `json:"actual"`
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var a ask
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil || a.Actual <= 0 {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	now := time.Now()
	p.mu.Lock()
	lims := p.keys[r.Header.Get("Authorization")]
	if lims == nil {
		burst := p.rpm
		if p.rburst > 0 {
			burst = p.rburst
		}
		lims = &[2]*rate.Limiter{
			rate.NewLimiter(rate.Limit(float64(p.rpm)/60), int(burst)),
			rate.NewLimiter(rate.Limit(float64(p.tpm)/60), int(p.tpm)),
		}
		p.keys[r.Header.Get("Authorization")] = lims
		if p.first.IsZero() {
			p.first = now
		}
	}
	p.last = now
	rq, tk := lims[0].TokensAt(now), lims[1].TokensAt(now)
	ok := rq >= 1 && tk >= float64(a.Actual)
	if ok {
		lims[0].AllowN(now, 1)
		lims[1].AllowN(now, int(a.Actual))
		rq, tk = rq-1, tk-float64(a.Actual)
		p.ok++
		p.tokens += a.Actual
	} else {
		p.lim++
	}
	p.mu.Unlock()
	h := w.Header()
	header(h, "requests", p.rpm, rq)
	header(h, "tokens", p.tpm, tk)
	if !ok {
		wait := max(time.Duration((1-rq)/(float64(p.rpm)/60)*1e9), time.Duration((float64(a.Actual)-tk)/(float64(p.tpm)/60)*1e9))
		h.Set("retry-after-ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"type":"rate_limit_exceeded"}}`)
		return
	}
	h.Set("Content-Type", "application/json")
	prompt := a.Actual / 3
	fmt.Fprintf(w, `{"id":"x","usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, prompt, a.Actual-prompt, a.Actual)
}

// header sets OpenAI's x-ratelimit-{limit,remaining,reset}-NAME: the reset
// is the time until the bucket is full again, Go-style ("6m0s", "1.5s").
func header(h http.Header, name string, perMinute int64, left float64) {
	left = max(left, 0)
	reset := time.Duration((float64(perMinute) - left) / (float64(perMinute) / 60) * 1e9).Round(time.Millisecond)
	h.Set("x-ratelimit-limit-"+name, strconv.FormatInt(perMinute, 10))
	h.Set("x-ratelimit-remaining-"+name, strconv.FormatInt(int64(left), 10))
	h.Set("x-ratelimit-reset-"+name, reset.String())
}

func (p *provider) row() Row {
	p.mu.Lock()
	defer p.mu.Unlock()
	secs := p.last.Sub(p.first).Seconds()
	return Row{OK: p.ok, Limit: p.lim, Tokens: p.tokens, Seconds: secs, Allowed: float64(p.tpm) + float64(p.tpm)/60*secs}
}

// report is what a worker prints when it is done.
type report struct {
	Sent    int64 `json:"sent"`
	Refused int64 `json:"refused"`
	Calls   Calls `json:"calls"` // the gate's store calls (shared row)
}

// workerMain is one worker: -concurrency callers through one gate (shared
// through Redis, or its own) until -seconds have passed.
func workerMain(args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "priority" {
		return priorityWorker(args[1:], out) // (priority.go)
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	providerURL := fs.String("provider", "", "")
	redisAddr := fs.String("redis", "", "")
	prefix := fs.String("prefix", "", "")
	shared := fs.Bool("shared", false, "")
	share := fs.Float64("share", 1, "")
	rpm := fs.Int64("rpm", 0, "")
	tpm := fs.Int64("tpm", 0, "")
	seconds := fs.Float64("seconds", 0, "")
	conc := fs.Int("concurrency", 1, "")
	seed := fs.Uint64("seed", 1, "")
	idle := fs.Bool("idle", false, "")
	inFlight := fs.Int("in-flight", 0, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	end := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	if *idle {
		time.Sleep(time.Until(end))
		return json.NewEncoder(out).Encode(report{})
	}
	cfg := gate.Config{
		Name:       "openai-key",
		Limit:      bucket.Limit{Capacity: int64(float64(*rpm) * *share), Rate: float64(*rpm) * *share / 60},
		Dimensions: []gate.Dimension{{Name: "tokens", Limit: bucket.Limit{Capacity: int64(float64(*tpm) * *share), Rate: float64(*tpm) * *share / 60}}},
		MaxQueue:   *conc,
		MaxWait:    10 * time.Second,
	}
	var cs *counted
	if *shared {
		st, err := redisstore.Open("redis://"+*redisAddr, redisstore.WithPrefix(*prefix))
		if err != nil {
			return err
		}
		defer st.Close()
		cs = &counted{Store: st}
		cfg.Store, cfg.MaxInFlight = cs, *inFlight
	}
	g, err := gate.New(cfg)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: httplimit.NewTransport(nil, g,
		httplimit.WithTokenEstimate(func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.Header.Get("X-Estimate"), 10, 64)
			return n
		}),
		httplimit.WithTokenUsage(httplimit.UsageFromJSON))}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var sent, refused atomic.Int64
	var wg sync.WaitGroup
	for c := range *conc {
		rnd := rand.New(rand.NewPCG(*seed, uint64(c)))
		wg.Go(func() {
			for ctx.Err() == nil {
				est := 100 + rnd.Int64N(901)
				actual := max(int64(float64(est)*(0.7+0.6*rnd.Float64())), 1)
				body := fmt.Sprintf(`{"max_tokens":%d,"actual":%d}`, est, actual)
				req, _ := http.NewRequestWithContext(ctx, "POST", *providerURL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk-test")
				req.Header.Set("X-Estimate", strconv.FormatInt(est, 10))
				res, err := client.Do(req)
				if err != nil {
					if errors.Is(err, sluice.ErrWaitTooLong) && time.Until(end) < cfg.MaxWait {
						return // its turn would come after the row's end: so would every later call's
					}
					if ctx.Err() == nil {
						refused.Add(1)
						if os.Getenv("LLMPROOF_DEBUG") != "" {
							fmt.Fprintln(os.Stderr, err)
						}
						time.Sleep(100 * time.Millisecond) // (a refusal is immediate: back off as a real worker would)
					}
					continue
				}
				sent.Add(1)
				io.Copy(io.Discard, bufio.NewReader(res.Body))
				res.Body.Close()
			}
		})
	}
	wg.Wait()
	rep := report{Sent: sent.Load(), Refused: refused.Load()}
	if cs != nil {
		rep.Calls = cs.calls()
	}
	return json.NewEncoder(out).Encode(rep)
}
