package main

import (
	"testing"
	"time"
)

// The proof with a shared gate (issue 28): 4 worker processes,
// 2 interactive and 2 batch, through one gate shared on a real Redis
// with classes, against the fake provider (100 requests/s from a bucket
// of 100; the gate 100/s from 80). Batch (reserve 0.1, max_queue 100 ms)
// floods at 10x the refill, interactive sends 20 % of it: the provider
// answers no 429; every interactive call is admitted, its p99 wait
// within batch's max_queue + 5 ms (105 ms: batch's line may run 2 tokens
// past the gate's bucket, 20 ms of refill, and a wait is measured from
// the call through its Redis round trip to its turn); batch fills the
// rest, the provider's 200s at least 95 % of its allowance (its bucket
// plus its refill from the first request to the last).
func TestProofPriorities(t *testing.T) {
	cfg := PriorityConfig{Seconds: 8, Rate: 100, Burst: 100, GateCapacity: 80, BatchReserve: 100_000,
		BatchMaxQueue: 100 * time.Millisecond, BatchFactor: 10, InteractiveShare: 0.2}
	r, err := RunPriority(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + PriorityTable(cfg, r))
	bound := cfg.BatchMaxQueue + 5*time.Millisecond
	if r.Limit != 0 {
		t.Errorf("rule: the provider answers no 429: %d", r.Limit)
	}
	if i := r.Interactive; i.Admitted != i.Attempts || i.Errors != 0 || i.Attempts < 100 {
		t.Errorf("rule: every interactive call is admitted: %d of %d (%d errors)", i.Admitted, i.Attempts, i.Errors)
	}
	if p99 := r.Interactive.Quantile(0.99); p99 > bound {
		t.Errorf("rule: interactive's p99 wait is within batch's max_queue + 5 ms (%v): %v", bound, p99)
	}
	if r.Batch.Admitted == 0 || r.Batch.Errors != 0 {
		t.Errorf("batch fills the rest: %d admitted, %d errors", r.Batch.Admitted, r.Batch.Errors)
	}
	if u := r.Utilisation(); u < 0.95 {
		t.Errorf("rule: the provider's 200s are at least 95 %% of its allowance: %.1f %% (%d of %.0f)", u*100, r.OK, r.Allowed)
	}
}
