// Adaptive limits through real sluice serve processes: POST /v1/feedback
// on one instance lowers a key's ceiling, every instance decides the key
// under it, statuses and /v1/stats show it. In memory, on Redis and on a
// Redis Cluster (2 instances each).

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

const adaptiveServePolicy = `
limits:
  - name: tool
    key: "tool:{tool}"
    capacity: 10
    refill_per_second: 100
    adaptive: {min_refill_per_second: 10, increase_per_second: 0.001, cooldown: 1m}
`

func TestServeAdaptiveFeedback(t *testing.T) {
	run := func(t *testing.T, procs []*proc) {
		d := fmt.Sprintf(`{"tool": %q}`, t.Name())
		code, body := call(t, procs[0], "POST", "/v1/feedback", `{"descriptors": `+d+`, "outcome": "overloaded"}`)
		if code != 200 || !strings.Contains(body, `"lowered":true`) || !strings.Contains(body, `"adaptive_refill_per_second":50`) {
			t.Fatalf("feedback: %d %s", code, body)
		}
		last := procs[len(procs)-1]
		if code, body := call(t, last, "POST", "/v1/feedback", `{"descriptors": `+d+`, "outcome": "overloaded", "limits": ["tool"]}`); code != 200 || !strings.Contains(body, `"lowered":false`) {
			t.Fatalf("another instance's overload within the cooldown: %d %s", code, body)
		}
		for _, p := range procs {
			call(t, p, "POST", "/v1/check", `{"descriptors": `+d+`}`) // (reads the ceiling)
			_, body := call(t, p, "POST", "/v1/check", `{"descriptors": `+d+`}`)
			var a struct {
				Limits []struct {
					Adaptive float64 `json:"adaptive_refill_per_second"`
				} `json:"limits"`
			}
			if err := json.Unmarshal([]byte(body), &a); err != nil || len(a.Limits) != 1 || a.Limits[0].Adaptive < 49.9 || a.Limits[0].Adaptive > 50.1 {
				t.Fatalf("every instance decides under the ceiling: %s", body)
			}
			_, stats := call(t, p, "GET", "/v1/stats", "")
			if !strings.Contains(stats, `"adaptive_refill_per_second":50`) {
				t.Fatalf("/v1/stats shows the ceiling: %s", stats)
			}
		}
		if code, body := call(t, procs[0], "POST", "/v1/feedback", `{"descriptors": `+d+`, "outcome": "ok", "limits": ["nope"]}`); code != 400 || !strings.Contains(body, `"unknown_limit"`) {
			t.Fatalf("unknown limit: %d %s", code, body)
		}
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, adaptiveServePolicy)
	t.Run("memory", func(t *testing.T) { run(t, []*proc{serve(t, "--config", pol)}) })
	t.Run("redis", func(t *testing.T) {
		r := redistest.New(t)
		store := "redis://" + r.Addr
		run(t, []*proc{serve(t, "--config", pol, "--store", store), serve(t, "--config", pol, "--store", store)})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t, 3)
		store := "redis+cluster://" + strings.Join(cl.Addrs(), ",")
		run(t, []*proc{serve(t, "--config", pol, "--store", store), serve(t, "--config", pol, "--store", store)})
	})
}
