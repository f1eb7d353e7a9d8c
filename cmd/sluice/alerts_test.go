package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// Alerts across two sluice serve instances on one Redis: checks of one key
// spread over both cross each threshold of a quota; each threshold fires
// exactly one event (sluice_alerts_total summed over the instances, and
// one webhook event), signed with --webhook-secret-file's secret, retried
// within 5 s after the receiver's first answer, a 500; answers say
// near_limit past 0.8.
func TestServeAlertsTwoInstances(t *testing.T) {
	r := redistest.New(t)
	type delivery struct {
		at time.Time
		a  server.Alert
	}
	var mu sync.Mutex
	tries := map[float64][]time.Time{}
	var delivered []delivery
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		if got := req.Header.Get("X-Sluice-Signature"); got != server.Sign([]byte("hush"), b) {
			t.Errorf("signature %q does not match the body %s", got, b)
			w.WriteHeader(400)
			return
		}
		var a server.Alert
		if err := json.Unmarshal(b, &a); err != nil {
			t.Errorf("%s: %v", b, err)
		}
		mu.Lock()
		defer mu.Unlock()
		tries[a.Threshold] = append(tries[a.Threshold], time.Now())
		if len(tries[a.Threshold]) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		delivered = append(delivered, delivery{time.Now(), a})
	}))
	defer hook.Close()
	dir := t.TempDir()
	pol, secret := filepath.Join(dir, "p.yaml"), filepath.Join(dir, "secret")
	writePolicy(t, pol, `limits:
  - name: monthly
    key: "team:{team}"
    algorithm: quota
    period: month
    timezone: Europe/Berlin
    limit: 20
    alerts: [0.8, 0.95, 1.0]
`)
	os.WriteFile(secret, []byte("hush\n"), 0o600)
	args := []string{"--config", pol, "--store", "redis://" + r.Addr, "--webhook", hook.URL, "--webhook-secret-file", secret}
	procs := []*proc{serve(t, args...), serve(t, args...)}
	var wg sync.WaitGroup
	for i := range 30 { // (20 admitted, then refusals: still at 1.0)
		wg.Go(func() {
			code, body := call(t, procs[i%2], "POST", "/v1/check", `{"descriptors": {"team": "x"}}`)
			if code != 200 && code != 429 {
				t.Errorf("%d %s", code, body)
			}
		})
	}
	wg.Wait()
	_, body := call(t, procs[0], "POST", "/v1/check", `{"descriptors": {"team": "x"}, "cost": 0}`)
	if !regexp.MustCompile(`"near_limit":true`).MatchString(body) {
		t.Fatalf("no near_limit past 0.8: %s", body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(delivered)
		mu.Unlock()
		if n >= 3 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // (no duplicate comes)
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 3 {
		t.Fatalf("%d events delivered, want one per threshold: %+v", len(delivered), delivered)
	}
	for _, d := range delivered {
		ts := tries[d.a.Threshold]
		if len(ts) != 2 {
			t.Errorf("threshold %v: %d attempts, want 2", d.a.Threshold, len(ts))
		} else if gap := ts[1].Sub(ts[0]); gap > 5*time.Second {
			t.Errorf("threshold %v: retried after %v, want within 5 s", d.a.Threshold, gap)
		}
		if d.a.Limit != "monthly" || d.a.Key != "team:x" || d.a.LimitValue != 20 || d.a.PeriodStart.IsZero() {
			t.Errorf("event %+v", d.a)
		}
		berlin, _ := time.LoadLocation("Europe/Berlin")
		if ps := d.a.PeriodStart.In(berlin); ps.Day() != 1 || ps.Hour() != 0 {
			t.Errorf("period_start %v is not a month's start in Berlin", ps)
		}
	}
	for _, th := range []string{"0.8", "0.95", "1"} {
		var sum float64
		for _, p := range procs {
			_, m := call(t, p, "GET", "/metrics", "")
			re := regexp.MustCompile(`sluice_alerts_total\{limit="monthly",threshold="` + regexp.QuoteMeta(th) + `"\} (\d+)`)
			if mm := re.FindStringSubmatch(m); mm != nil {
				n, _ := strconv.ParseFloat(mm[1], 64)
				sum += n
			}
		}
		if sum != 1 {
			t.Errorf("sluice_alerts_total{threshold=%s} summed over the instances: %v, want 1", th, sum)
		}
	}
}
