package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

const spendServePolicy = `
prices:
  gpt-4o: {input: 2.50, output: 10.00, cached_input: 1.25}
limits:
  - name: tpm
    key: "team:{team}"
    hash_tag: "{team}"
    capacity: 1000000
    refill: 1000000/m
    unit: tokens
  - name: budget
    key: "team:{team}"
    hash_tag: "{team}"
    algorithm: quota
    period: month
    timezone: Europe/Berlin
    limit: 0.45
    unit: usd
`

type spendAnswer struct {
	Allowed bool   `json:"allowed"`
	Lease   string `json:"lease"`
	Code    string `json:"code"`
	Limits  []struct {
		Name      string `json:"name"`
		TokenCost int64  `json:"token_cost"`
		Remaining int64  `json:"tokens_remaining"`
	} `json:"limits"`
}

func (a spendAnswer) limit(name string) (cost, remaining int64) {
	for _, l := range a.Limits {
		if l.Name == name {
			return l.TokenCost, l.Remaining
		}
	}
	return -1, -1
}

// LiteLLM's reproduction (BerriAI/litellm#34732) against real sluice serve
// processes: 5 concurrent calls with long prompts ($0.10 estimated each)
// against a $0.45 monthly budget, spread over the instances, admit $0.40;
// their usage settles the spend exactly, seen by every instance. In
// memory, on Redis (2 instances) and on a Redis Cluster (2 instances).
func TestServeSpendBudget(t *testing.T) {
	run := func(t *testing.T, procs []*proc) {
		team := fmt.Sprintf(`{"team": %q}`, t.Name())
		var mu sync.Mutex
		var admitted []spendAnswer
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				code, body := call(t, procs[i%len(procs)], "POST", "/v1/check",
					`{"descriptors": `+team+`, "usage_estimate": {"model": "gpt-4o", "input_tokens": 20000, "max_output_tokens": 5000}}`)
				var a spendAnswer
				if err := json.Unmarshal([]byte(body), &a); err != nil || (code != 200 && code != 429) {
					t.Errorf("%d %s", code, body)
					return
				}
				if a.Allowed {
					mu.Lock()
					admitted = append(admitted, a)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		var reserved int64
		for _, a := range admitted {
			c, _ := a.limit("budget")
			reserved += c
		}
		if len(admitted) != 4 || reserved != 400_000 || reserved > 450_000 {
			t.Fatalf("%d admitted, %d micro-dollars reserved; want 4 and $0.40 of the $0.45", len(admitted), reserved)
		}
		for i, a := range admitted { // each used 20,000 input (10,000 cached) and 1,000 output tokens: $0.0475
			code, body := call(t, procs[(i+1)%len(procs)], "POST", "/v1/settle", fmt.Sprintf(
				`{"lease": %q, "usage": {"model": "gpt-4o", "input_tokens": 20000, "cached_input_tokens": 10000, "output_tokens": 1000}}`, a.Lease))
			if code != 200 {
				t.Fatalf("settle: %d %s", code, body)
			}
		}
		for _, p := range procs {
			_, body := call(t, p, "POST", "/v1/check", `{"descriptors": `+team+`, "cost": 0}`)
			var a spendAnswer
			json.Unmarshal([]byte(body), &a)
			if _, rem := a.limit("budget"); rem != 450_000-4*47_500 {
				t.Fatalf("%d micro-dollars left, want %d: %s", rem, 450_000-4*47_500, body)
			}
		}
		var spent int64
		for _, p := range procs {
			_, body := call(t, p, "GET", "/v1/stats", "")
			var st struct {
				Limits []struct {
					Name  string `json:"name"`
					Unit  string `json:"unit"`
					Spent *int64 `json:"spent_micro_usd"`
				} `json:"limits"`
			}
			json.Unmarshal([]byte(body), &st)
			for _, l := range st.Limits {
				if l.Name == "budget" && l.Unit == "usd" && l.Spent != nil {
					spent += *l.Spent
				}
			}
		}
		if spent != 4*47_500 {
			t.Fatalf("the instances' /v1/stats count %d micro-dollars spent, want %d", spent, 4*47_500)
		}
		code, body := call(t, procs[0], "POST", "/v1/check", `{"descriptors": `+team+`, "usage_estimate": {"model": "gpt-9", "input_tokens": 1}}`)
		if code != 422 || !strings.Contains(body, `"unknown_model"`) {
			t.Fatalf("unknown model: %d %s", code, body)
		}
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, spendServePolicy)
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
