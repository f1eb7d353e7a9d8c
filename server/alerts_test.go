package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

// A limit's alerts fire once per key and threshold in a period, as a
// counter and a signed webhook POST retried after a failure; answers say
// near_limit once the lowest alert below 1 is crossed.
func TestAlerts(t *testing.T) {
	p, err := policy.Parse([]byte(`
limits:
  - name: daily
    key: "team:{team}"
    algorithm: quota
    period: day
    limit: 10
    alerts: [0.5, 0.8, 1.0]
`))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []server.Alert
	attempts := map[float64]int{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get(server.SignatureHeader) != server.Sign([]byte("k3y"), b) {
			t.Errorf("bad signature %q", r.Header.Get(server.SignatureHeader))
		}
		var a server.Alert
		json.Unmarshal(b, &a)
		mu.Lock()
		defer mu.Unlock()
		if attempts[a.Threshold]++; attempts[a.Threshold] == 1 {
			w.WriteHeader(500) // the first attempt of each event fails
			return
		}
		got = append(got, a)
	}))
	defer hook.Close()
	reg := prometheus.NewRegistry()
	l, err := limiter.New(p, memstore.New(), limiter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, func(c *server.Config) {
		c.Limiter, c.Gatherer, c.Registerer = l, reg, reg
		c.Alerts = server.AlertConfig{WebhookURL: hook.URL, WebhookSecret: []byte("k3y"), RetryFirst: 50 * time.Millisecond}
	})
	near := func() bool {
		_, m := post(t, ts, "/v1/check", `{"descriptors": {"team": "a"}}`)
		st := m["limits"].([]any)[0].(map[string]any)
		return st["near_limit"] == true
	}
	for i := 1; i <= 12; i++ {
		if n := near(); n != (i >= 5) {
			t.Fatalf("check %d: near_limit %v", i, n)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // (no more come)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d events delivered, want one per threshold: %+v", len(got), got)
	}
	for _, a := range got {
		if a.Limit != "daily" || !strings.HasSuffix(a.Key, "team:a") || a.LimitValue != 10 || a.Used < int64(a.Threshold*10) || a.PeriodStart.IsZero() || a.At.IsZero() {
			t.Errorf("event %+v", a)
		}
		if attempts[a.Threshold] != 2 {
			t.Errorf("threshold %v: %d attempts, want 2 (a retry after the 500)", a.Threshold, attempts[a.Threshold])
		}
	}
	for _, th := range []string{"0.5", "0.8", "1"} {
		if n := testutil.ToFloat64(mustCounter(t, reg, "sluice_alerts_total", th)); n != 1 {
			t.Errorf("sluice_alerts_total{threshold=%s} %v", th, n)
		}
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name, th string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "threshold" && lp.GetValue() == th {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no %s{threshold=%q}", name, th)
	return nil
}
