// Command waiters measures waiting through sluice serve on Redis: N
// concurrent /v1/check requests with max_wait_ms on one hot key, against a
// bucket of capacity 1 refilled at R per second. Each round starts with a
// pause of -lead on the key (/v1/pause: the bucket is empty exactly lead
// after the server decides it), so that every waiter has booked before the
// first turn and the k-th turn is due lead + (k+1)/R after the pause. It
// reports Redis script calls per admitted request (INFO commandstats:
// FCALL, EVALSHA, EVAL) and the lateness of each admission (its answer's
// arrival here minus its due time, counted from when the pause was sent:
// over-stated by at most the pause's round trip, never under-stated),
// p50/p99/max per round and pooled; an answer that arrives before its
// turn is reported as EARLY (it must never happen).
//
//	GOWORK=off go run ./cmd/waiters -sluice /path/to/sluice [-n 200] [-rate 1000] [-rounds 3]
//
// It starts a redis-server and a sluice serve of its own on free loopback
// ports and stops them; -sluice names the binary to measure, so that two
// builds (before and after a change) can be compared on the same machine.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

func main() {
	bin := flag.String("sluice", "", "the sluice binary to measure")
	n := flag.Int("n", 200, "concurrent waiters per round")
	rate := flag.Int("rate", 1000, "the bucket's refill per second (capacity 1)")
	rounds := flag.Int("rounds", 3, "rounds")
	memory := flag.Bool("memory", false, "serve from memory instead of Redis (no store round trips at all)")
	lead := flag.Duration("lead", 50*time.Millisecond, "each round's first turn comes this long after the round starts (a pause), so that every waiter has booked by then")
	floor := flag.Bool("floor", false, "the floor: no waiting in sluice; the client sends request k itself at k/rate (on 200 open connections), against a bucket that admits them at once, and lateness is each answer's time less k/rate")
	flag.Parse()
	if *bin == "" {
		log.Fatal("-sluice is required")
	}
	srv, err := redistest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	dir, _ := os.MkdirTemp("", "waiters")
	defer os.RemoveAll(dir)
	pol := filepath.Join(dir, "p.yaml")
	capacity, perToken := 1, time.Second/time.Duration(*rate)
	if *floor {
		capacity = 1_000_000
	}
	os.WriteFile(pol, []byte(fmt.Sprintf("limits:\n  - {name: hot, key: \"k:{k}\", capacity: %d, refill_per_second: %d}\n", capacity, *rate)), 0o644)
	addr := freeAddr()
	args := []string{"serve", "--config", pol, "--http", addr, "--max-waiting", strconv.Itoa(*n * 2), "--max-wait", "60s", "--log-level", "warn", "--reload", "0"}
	if !*memory {
		args = append(args, "--store", "redis://"+srv.Addr)
	}
	cmd := exec.Command(*bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitUp(addr)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *n * 2}, Timeout: time.Minute}
	fmt.Printf("%s: %d waiters, capacity %d at %d/s, %d rounds\n", *bin, *n, capacity, *rate, *rounds)
	var all, warm []time.Duration // every round's lateness, and that of rounds 2 on
	for round := 1; round <= *rounds; round++ {
		key := fmt.Sprintf("r%d", round)
		var start time.Time // turn k is due at start + (k+1)/rate (floor: request k is sent at start + k/rate)
		var pauseRTT time.Duration
		if !*floor {
			// A pause of -lead: the bucket is empty exactly lead after the
			// server decides the pause (at some time in [sent, answered]),
			// so the k-th turn is due lead + (k+1)/rate after it, and every
			// waiter has booked by then. Measured from sent, lateness is
			// over-stated by at most the pause's round trip, never under.
			sent := time.Now()
			pause(client, addr, key, *lead)
			start, pauseRTT = sent.Add(*lead), time.Since(sent)
		}
		beforeF, beforeE := scriptCalls(srv.Addr)
		beforeL := serverLateness(addr)
		var mu sync.Mutex
		var admitted []time.Duration
		refused := 0
		var wg sync.WaitGroup
		if *floor {
			start = time.Now()
		}
		for k := range *n {
			wg.Go(func() {
				wait := 60000
				if *floor { // the client keeps the line: send at the turn, no waiting in sluice
					time.Sleep(time.Until(start.Add(time.Duration(k) * perToken)))
					wait = 0
				}
				ok := post(client, addr, key, wait)
				at := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				if ok {
					admitted = append(admitted, at)
				} else {
					refused++
				}
			})
		}
		wg.Wait()
		f, e := scriptCalls(srv.Addr)
		f, e = f-beforeF, e-beforeE
		slices.Sort(admitted)
		var late []time.Duration
		early, earliest := 0, time.Duration(0)
		for k, at := range admitted {
			due := time.Duration(k) * perToken
			if !*floor {
				due += perToken // (the pause empties the bucket: the first turn is a token later)
			}
			if at < due { // (due is never later than the true turn: this answer was early)
				early, earliest = early+1, min(earliest, at-due)
			}
			late = append(late, max(at-due, 0))
		}
		slices.Sort(late)
		all = append(all, late...)
		if round > 1 {
			warm = append(warm, late...)
		}
		pct := func(p float64) time.Duration { return percentile(late, p) }
		adm := float64(max(len(admitted), 1))
		afterL := serverLateness(addr)
		var server string
		if n := afterL[len(afterL)-1] - beforeL[len(beforeL)-1]; n > 0 {
			server = fmt.Sprintf(" server-wakeups<=0.64ms %.0f%% <=2.56ms %.0f%% <=10.24ms %.0f%%", 100*float64(afterL[3]-beforeL[3])/float64(n),
				100*float64(afterL[4]-beforeL[4])/float64(n), 100*float64(afterL[5]-beforeL[5])/float64(n))
		}
		if !*floor {
			server += fmt.Sprintf(" (pause round trip %v)", pauseRTT.Round(10*time.Microsecond))
		}
		if early > 0 {
			server += fmt.Sprintf(" EARLY: %d answers before their turn (by up to %v)", early, -earliest)
		}
		fmt.Printf("round %d admitted %d refused %d decision-calls/admitted %.2f book-calls/admitted %.2f lateness p50 %v p99 %v max %v%s\n", round, len(admitted), refused,
			float64(f)/adm, float64(e)/adm, pct(0.5).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), late[len(late)-1].Round(10*time.Microsecond), server)
	}
	slices.Sort(all)
	slices.Sort(warm)
	fmt.Printf("all rounds: %d admissions, lateness p50 %v p99 %v max %v\n", len(all),
		percentile(all, 0.5).Round(10*time.Microsecond), percentile(all, 0.99).Round(10*time.Microsecond), percentile(all, 1).Round(10*time.Microsecond))
	if len(warm) > 0 {
		fmt.Printf("rounds 2-%d (warm): %d admissions, lateness p50 %v p99 %v max %v\n", *rounds, len(warm),
			percentile(warm, 0.5).Round(10*time.Microsecond), percentile(warm, 0.99).Round(10*time.Microsecond), percentile(warm, 1).Round(10*time.Microsecond))
	}
}

// percentile is the p-quantile of sorted (0 when empty).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(p*float64(len(sorted))), len(sorted)-1)]
}

func post(c *http.Client, addr, key string, maxWaitMS int) bool {
	body := fmt.Sprintf(`{"descriptors": {"k": %q}, "max_wait_ms": %d}`, key, maxWaitMS)
	resp, err := c.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == 200
}

// pause posts a pause of d on key's bucket.
func pause(c *http.Client, addr, key string, d time.Duration) {
	body := fmt.Sprintf(`{"descriptors": {"k": %q}, "retry_after_ms": %d}`, key, d.Milliseconds())
	resp, err := c.Post("http://"+addr+"/v1/pause", "application/json", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		log.Fatalf("pause: %s", resp.Status)
	}
}

// scriptCalls is Redis's count of FCALL and of EVALSHA + EVAL calls so far.
func scriptCalls(addr string) (fcall, eval int64) {
	calls, err := redistest.CommandCalls(addr)
	if err != nil {
		log.Fatal(err)
	}
	return calls["fcall"], calls["evalsha"] + calls["eval"]
}

// serverLateness reads sluice_wait_lateness_seconds from the server's
// /metrics: its cumulative bucket counts (le 1e-5, 4e-5, ... 2.62 s) and
// its total count last; zeros when the server has none.
func serverLateness(addr string) []int64 {
	out := make([]int64, 11)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	i := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "sluice_wait_lateness_seconds_bucket{") && i < 10:
			f := strings.Fields(line)
			out[i], _ = strconv.ParseInt(f[len(f)-1], 10, 64)
			i++
		case strings.HasPrefix(line, "sluice_wait_lateness_seconds_count"):
			f := strings.Fields(line)
			out[10], _ = strconv.ParseInt(f[len(f)-1], 10, 64)
		}
	}
	return out
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitUp(addr string) {
	for range 200 {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatal("sluice serve did not come up")
}
