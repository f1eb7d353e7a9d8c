package main

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" { // started by Run as a worker
		if err := workerMain(os.Args[1:], os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The proof, short (about 25 s): 4 worker processes through one adaptive
// gate shared on a real Redis, against a provider with a hidden capacity
// and no rate-limit headers, use at least 85 % of its capacity with at
// most 3 % of calls answered 429 and follow its rise within 10 s; the
// same gate fixed at its ceiling's Max gets many more 429s.
func TestProof(t *testing.T) {
	cfg := Defaults()
	cfg.Seconds, cfg.FixedSeconds, cfg.Settle, cfg.Follow = 20, 3, 5, 5
	cfg.Rows = []string{"adaptive", "fixed"}
	rows, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + Table(cfg, rows))
	a, f := rows[0], rows[1]
	if a.ConvergedBefore < 0.85 || a.ConvergedAfter < 0.85 {
		t.Errorf("converged, the fleet uses >= 85%% of the capacity: before %.1f%%, after %.1f%%", a.ConvergedBefore*100, a.ConvergedAfter*100)
	}
	if a.SteadyRefused > 0.03 {
		t.Errorf("converged, at most 3%% of calls answered 429: %.2f%%", a.SteadyRefused*100)
	}
	if a.FollowSeconds < 0 || a.FollowSeconds > 10 {
		t.Errorf("the fleet follows the capacity change within 10 s: %v", a.FollowSeconds)
	}
	if f.Refused429 < 5*max(a.Refused429, 0.01) {
		t.Errorf("without Adaptive the 429s are many more: %.2f%% (adaptive %.2f%%)", f.Refused429*100, a.Refused429*100)
	}
}

// The proof through the service, short (about 22 s): 4 Python worker
// processes checking a real sluice serve (on the run's Redis) whose limit
// is adaptive, each 429 without hints reported with report_response (POST
// /v1/feedback), use at least 85 % of the provider's capacity with at most
// 3 % of calls answered 429 once converged, and follow its rise within
// 10 s. It needs python3 (the client from clients/python) and builds
// sluice unless $SLUICE_BIN names it.
func TestProofService(t *testing.T) {
	cfg := Defaults()
	cfg.Seconds, cfg.Settle, cfg.Follow = 20, 5, 5
	cfg.Rows = []string{"service"}
	rows, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + Table(cfg, rows))
	a := rows[0]
	if a.ConvergedBefore < 0.85 || a.ConvergedAfter < 0.85 {
		t.Errorf("converged, the Python fleet uses >= 85%% of the capacity: before %.1f%%, after %.1f%%", a.ConvergedBefore*100, a.ConvergedAfter*100)
	}
	if a.SteadyRefused > 0.03 {
		t.Errorf("converged, at most 3%% of calls answered 429: %.2f%%", a.SteadyRefused*100)
	}
	if a.FollowSeconds < 0 || a.FollowSeconds > 10 {
		t.Errorf("the fleet follows the capacity change within 10 s: %v", a.FollowSeconds)
	}
}
