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

// The proof, short: 4 worker processes through a gate shared on a real
// Redis get no 429 from the provider and at least 90% of its allowance;
// each worker copying the bucket gets 429s; a quarter each with one idle
// leaves a quarter unused.
func TestProof(t *testing.T) {
	cfg := Config{Seconds: 3, Workers: 4, Concurrency: 8, RPM: 3000, TPM: 600000, Share: 0.95, Rows: []string{"shared", "full", "quarter"}}
	rows, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + Table(cfg, rows))
	shared, full, quarter := rows[0], rows[1], rows[2]
	if shared.Limit != 0 || shared.Share() < 0.90 {
		t.Errorf("rule: one gate shared through Redis at 95%% of the provider's limits gets no 429 and >= 90%% of the allowance: %+v (%.1f%%)", shared, shared.Share()*100)
	}
	if per := float64(shared.RedisCalls) / float64(max(shared.OK, 1)); per > 2 {
		t.Errorf("rule: a shared gate call with a token estimate and a provider's headers costs Redis at most 2 calls (booking; settle, ceilings and release in one): %.2f per 200 (%+v)", per, shared.Calls)
	}
	if full.Limit == 0 {
		t.Errorf("a gate per worker at the full limits overruns the provider (429s): %+v", full)
	}
	if quarter.Limit != 0 || quarter.Share() > 0.8 {
		t.Errorf("a quarter per worker with one idle leaves a quarter unused: %+v (%.1f%%)", quarter, quarter.Share()*100)
	}
}
