package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testbin"
)

// The client workers of the Python and TypeScript clients
// (clients/python/tests/worker.py, clients/typescript/support/worker.mjs).
var (
	pyWorker   = filepath.Join("..", "..", "clients", "python", "tests", "worker.py")
	nodeWorker = filepath.Join("..", "..", "clients", "typescript", "support", "worker.mjs")
)

// worker runs one client worker process of lang ("python" or "node") and
// decodes the JSON line it prints (numbers, and booleans as 0 or 1). It
// runs on goroutines of its own: it reports failures with t.Error.
func worker(t *testing.T, lang string, args ...string) map[string]float64 {
	var cmd *exec.Cmd
	if lang == "python" {
		cmd = exec.Command(python3, append([]string{pyWorker}, args...)...)
	} else {
		cmd = exec.Command(node, append([]string{nodeWorker}, args...)...)
	}
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Errorf("%s worker %v: %v\n%s", lang, args, err, stderr)
		return nil
	}
	var raw map[string]any
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Errorf("%s worker: %v: %q", lang, err, out)
		return nil
	}
	rep := map[string]float64{}
	for k, v := range raw {
		switch v := v.(type) {
		case float64:
			rep[k] = v
		case bool:
			if v {
				rep[k] = 1
			}
		}
	}
	return rep
}

// The interpreters of the client workers (needClients sets them).
var python3, node string

// needClients finds python3 and node and checks that the TypeScript client
// is built: the test is skipped in -short mode, and fails when one is
// missing.
func needClients(t *testing.T) {
	t.Helper()
	python3, node = testbin.Need(t, testbin.Python3), testbin.Need(t, testbin.Node)
	if _, err := os.Stat(filepath.Join("..", "..", "clients", "typescript", "dist", "index.js")); err != nil {
		testbin.Missing(t, "the TypeScript client built (clients/typescript/dist)", "build it (`npm ci && npm run build` in clients/typescript)")
	}
}

// Two Python and two Node processes share one budget on sluice serve — in
// memory on one instance, and on Redis through two instances: together
// they admit at most B + r*t and at least 95 % of it, and requests booked
// one after another by alternating languages are admitted in that order.
func TestClientsShareOneBudget(t *testing.T) {
	needClients(t)
	const B, r = 20, 50.0
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, fmt.Sprintf("limits:\n  - name: shared\n    key: \"k:{k}\"\n    capacity: %d\n    refill_per_second: %v\n  - name: slow\n    key: \"slow:{slow}\"\n    capacity: 1\n    refill_per_second: 4\n", B, r))
	mem := serve(t, "--config", pol)
	srv := startRedis(t)
	ra := serve(t, "--config", pol, "--store", "redis://"+srv.Addr)
	rb := serve(t, "--config", pol, "--store", "redis://"+srv.Addr)
	for _, tc := range []struct {
		name string
		urls []string // per worker: python, node, python, node
	}{
		{"memory", []string{mem.addr, mem.addr, mem.addr, mem.addr}},
		{"redis", []string{ra.addr, rb.addr, rb.addr, ra.addr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			langs := []string{"python", "node", "python", "node"}
			key := fmt.Sprintf("%s-%d", tc.name, time.Now().UnixNano())
			start := time.Now().Add(2500 * time.Millisecond) // after every process has started
			until := start.Add(4 * time.Second)
			reps := make([]map[string]float64, 4)
			var wg sync.WaitGroup
			for i, lang := range langs {
				wg.Go(func() {
					reps[i] = worker(t, lang, "load", tc.urls[i], key, ms(start), ms(until), "4")
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			var admitted, refused, last float64
			for _, rep := range reps {
				admitted += rep["admitted"]
				refused += rep["refused"]
				last = max(last, rep["last_ms"])
			}
			span := (last - float64(start.UnixMilli())) / 1000
			upper, lower := B+r*span, 0.95*(B+r*until.Sub(start).Seconds())
			t.Logf("admitted %v (python %v %v, node %v %v), refused %v; B + r*t = %.1f over %.2f s", admitted,
				reps[0]["admitted"], reps[2]["admitted"], reps[1]["admitted"], reps[3]["admitted"], refused, upper, span)
			if admitted > upper+1 || admitted < lower {
				t.Fatalf("rule: four processes in two languages share one budget: admitted %v, want within [%.1f, %.1f]", admitted, lower, upper)
			}
			for i, rep := range reps {
				if rep["admitted"] == 0 {
					t.Errorf("worker %d (%s) was never admitted: %v", i, langs[i], rep)
				}
			}

			// FIFO across the languages: a bucket of 1 token refilled every
			// 250 ms; four bookings sent 150 ms apart, in the order python,
			// node, python, node, are due at 0, 250, 500 and 750 ms and
			// admitted in the order they were sent. The order is judged by
			// when each worker actually sent its booking (a process on a
			// loaded machine can wake late), for bookings sent at least
			// 40 ms apart.
			slow := fmt.Sprintf("slow-%s-%d", tc.name, time.Now().UnixNano())
			at := time.Now().Add(2500 * time.Millisecond)
			sent, got := make([]float64, 4), make([]float64, 4)
			for i, lang := range langs {
				wg.Go(func() {
					rep := worker(t, lang, "fifo", tc.urls[i], slow, ms(at.Add(time.Duration(i)*150*time.Millisecond)))
					if rep["allowed"] != 1 {
						t.Errorf("%s booking %d not admitted: %v", lang, i, rep)
					}
					sent[i], got[i] = rep["sent_ms"], rep["admitted_ms"]
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			rel := func(v []float64) []float64 {
				out := make([]float64, len(v))
				for i := range v {
					out[i] = v[i] - float64(at.UnixMilli())
				}
				return out
			}
			t.Logf("sent at %v, admitted at %v ms after the first due send", rel(sent), rel(got))
			bySend := []int{0, 1, 2, 3}
			slices.SortFunc(bySend, func(a, b int) int { return cmp.Compare(sent[a], sent[b]) })
			checked := 0
			for k := 0; k+1 < len(bySend); k++ {
				a, b := bySend[k], bySend[k+1]
				if sent[b]-sent[a] < 40 {
					continue // too close to tell which reached the service first
				}
				checked++
				if got[a] > got[b] {
					t.Fatalf("rule: bookings are admitted in their order of arrival, whatever the language: booking %d (%s) sent %.0f ms before booking %d (%s) was admitted %.0f ms after it",
						a, langs[a], sent[b]-sent[a], b, langs[b], got[a]-got[b])
				}
			}
			if checked == 0 {
				t.Fatalf("no two bookings were sent 40 ms apart (sent at %v): the order could not be judged", rel(sent))
			}
		})
	}
}

func ms(t time.Time) string { return fmt.Sprint(t.UnixMilli()) }
