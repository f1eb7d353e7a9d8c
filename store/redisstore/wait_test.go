package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// A booking's Wait counts from when Take returns, not from when the script
// that decided it started: a caller that acts Wait after Take returns is
// neither early nor late by the script's own time (here a long one: one
// request booking on 3,000 buckets, on Redis's clock).
func TestBookedWaitCountsFromTheAnswer(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	sp := mustSpec(t, 1, 1) // a token a second
	items := make([]store.Item, 3000)
	for i := range items {
		items[i] = store.Item{Key: fmt.Sprintf("b%d", i), Spec: sp, Cost: 1}
	}
	sent := time.Now()
	if r, err := s.Take(ctx, items); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	emptied := time.Now() // every bucket emptied at one time in [sent, emptied] (one script, one clock reading)
	for i := range items {
		items[i].MaxWait = 5 * time.Second
	}
	start := time.Now()
	r, err := s.Take(ctx, items)
	returned := time.Now()
	acts, took := returned.Add(r.Wait), returned.Sub(start)
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	// each bucket's token is back 1 s after it was emptied
	if early := sent.Add(time.Second).Sub(acts); early > 0 {
		t.Fatalf("acting Wait (%v) after Take returns is %v early", r.Wait, early)
	}
	late := acts.Sub(emptied.Add(time.Second)) // (at least this late)
	t.Logf("the booking took %v; acting Wait after it is at least %v late", took, late)
	if late > took/2 {
		t.Fatalf("acting Wait (%v) after Take returns is %v late or more, of the %v the booking took: the wait counts from the script's start", r.Wait, late, took)
	}
}
