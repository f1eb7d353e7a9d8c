// --usage-export through real processes: two instances on Redis whose
// rows sum to sluice_decisions_total, a SIGTERM flushing the interval in
// progress, the key cap's "other" row, the POST sink, and sluice usage.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// decisionsTotal sums sluice_decisions_total of limit in a /metrics body.
func decisionsTotal(body, limit string) int64 {
	var n int64
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "sluice_decisions_total{") && strings.Contains(l, `limit="`+limit+`"`) {
			var v float64
			fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &v)
			n += int64(v)
		}
	}
	return n
}

// terminate sends SIGTERM and waits for p to exit.
func terminate(t *testing.T, p *proc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("sluice serve did not exit after SIGTERM")
	}
}

func sumRows(t *testing.T, files ...string) map[string]*UsageRow {
	t.Helper()
	out := map[string]*UsageRow{}
	for _, f := range files {
		if _, err := readUsage(f, func(r UsageRow) {
			s := out[r.Limit]
			if s == nil {
				s = &UsageRow{Limit: r.Limit}
				out[r.Limit] = s
			}
			s.Admitted += r.Admitted
			s.AdmittedCost += r.AdmittedCost
			s.Refused += r.Refused
			s.ShadowRefused += r.ShadowRefused
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

const usagePolicy = "limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 20\n    refill_per_second: 20\n  - name: global\n    key: all\n    capacity: 1000\n    refill_per_second: 100\n    shadow: true\n"

func TestServeUsageExportSumsToDecisionsOnRedis(t *testing.T) {
	srv := startRedis(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, usagePolicy)
	store := "redis://" + srv.Addr
	var procs []*proc
	var files []string
	for i := range 2 {
		f := filepath.Join(dir, fmt.Sprintf("usage-%d.jsonl", i))
		files = append(files, f)
		procs = append(procs, serve(t, "--config", pol, "--store", store, "--usage-export", f, "--usage-interval", "1s"))
	}
	// 2.5 s of checks over 5 tenants from both instances: several
	// intervals, admitted and refused, costs of 1 and 3.
	var wg sync.WaitGroup
	until := time.Now().Add(2500 * time.Millisecond)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(until); i++ {
				p := procs[(g+i)%2]
				body := fmt.Sprintf(`{"descriptors": {"tenant": "t%d"}, "cost": %d}`, i%5, 1+2*(i%2))
				req, _ := http.NewRequest("POST", p.addr+"/v1/check", strings.NewReader(body))
				if res, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	want := map[string]int64{}
	for _, p := range procs {
		_, m := call(t, p, "GET", "/metrics", "")
		for _, l := range []string{"tenant_api", "global"} {
			want[l] += decisionsTotal(m, l)
		}
	}
	for _, p := range procs {
		terminate(t, p) // (flushes the interval in progress)
	}
	got := sumRows(t, files...)
	for _, l := range []string{"tenant_api", "global"} {
		g := got[l]
		if g == nil || g.Admitted+g.Refused+g.ShadowRefused != want[l] || want[l] == 0 {
			t.Fatalf("%s: rows sum to %+v, sluice_decisions_total %d", l, g, want[l])
		}
	}
	if got["tenant_api"].Refused == 0 || got["tenant_api"].AdmittedCost <= got["tenant_api"].Admitted {
		t.Fatalf("the load refused nothing, or costs were not summed: %+v", got["tenant_api"])
	}
	// Rows name their interval and instance, one per (limit, key) and interval.
	var rows []UsageRow
	readUsage(files[0], func(r UsageRow) { rows = append(rows, r) })
	intervals := map[time.Time]bool{}
	for _, r := range rows {
		intervals[r.Start] = true
		if !r.End.After(r.Start) || r.Instance == "" || (r.Limit == "tenant_api" && !strings.HasPrefix(r.Key, "tenant:t")) {
			t.Fatalf("row %+v", r)
		}
	}
	if len(intervals) < 2 {
		t.Fatalf("%d intervals in 2.5 s at --usage-interval 1s", len(intervals))
	}
	// sluice usage sums them per tenant.
	code, out, errOut := runCmd(t, "", "usage", "--file", files[0], "--file", files[1], "--by", "tenant", "--limit", "tenant_api", "--json")
	if code != 0 {
		t.Fatalf("sluice usage: %d %s", code, errOut)
	}
	var sums []usageSum
	if err := json.Unmarshal([]byte(out), &sums); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var total int64
	for _, s := range sums {
		total += s.Admitted + s.Refused
	}
	if len(sums) != 5 || total != want["tenant_api"] {
		t.Fatalf("sluice usage --by tenant: %d groups, %d decisions (want 5, %d): %s", len(sums), total, want["tenant_api"], out)
	}
	if code, table, _ := runCmd(t, "", "usage", "--file", files[0], "--by", "tenant"); code != 0 || !strings.Contains(table, "ADMITTED_COST") || !strings.Contains(table, "t3") {
		t.Fatalf("table: %d\n%s", code, table)
	}
}

func TestServeUsageExportPostAndKeyCap(t *testing.T) {
	var mu sync.Mutex
	var got []UsageRow
	fails := 1 // the first POST is refused: the batch is retried
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			w.WriteHeader(503)
			return
		}
		if r.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(r.Body)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var row UsageRow
			if err := json.Unmarshal([]byte(l), &row); err != nil {
				t.Errorf("%q: %v", l, err)
			}
			got = append(got, row)
		}
	}))
	defer sink.Close()
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, usagePolicy)
	p := serve(t, "--config", pol, "--usage-export", sink.URL, "--usage-interval", "1s", "--usage-keys", "3")
	for i := range 10 {
		if code, body := call(t, p, "POST", "/v1/check", fmt.Sprintf(`{"descriptors": {"tenant": "k%d"}}`, i)); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	p.waitLog(t, "usage export: POST failed, retrying")
	terminate(t, p)
	mu.Lock()
	defer mu.Unlock()
	keys := map[string]int64{}
	var sum int64
	for _, r := range got {
		if r.Limit == "tenant_api" {
			keys[r.Key] += r.Admitted
			sum += r.Admitted
		}
	}
	// 3 keys counted apart in the interval (tenant_api's and global's
	// share the cap), the rest in "other"; nothing lost.
	if sum != 10 || keys["other"] == 0 || len(keys) > 4 {
		t.Fatalf("tenant_api rows %v (sum %d)", keys, sum)
	}
}

func TestUsageFileRotates(t *testing.T) {
	f := filepath.Join(t.TempDir(), "u.jsonl")
	s, err := newFileSink(f, 4096)
	if err != nil {
		t.Fatal(err)
	}
	row := UsageRow{Start: time.Now(), End: time.Now(), Instance: "i", Limit: "l", Key: strings.Repeat("k", 200), Admitted: 1}
	for range 100 { // about 30 KB: rotated several times, 3 old files kept
		if err := s.write([]UsageRow{row}); err != nil {
			t.Fatal(err)
		}
	}
	s.close(context.Background())
	n := 0
	for _, p := range append([]string{f}, rotated(f)...) {
		c, err := readUsage(p, func(UsageRow) {})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if c*int(len(rowsJSON([]UsageRow{row}))) > 4096+len(rowsJSON([]UsageRow{row})) {
			t.Fatalf("%s holds %d rows, beyond 4096 bytes", p, c)
		}
		n += c
	}
	if n == 0 || n >= 100 {
		t.Fatalf("%d rows kept in 4 files", n)
	}
}
