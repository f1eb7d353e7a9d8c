package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// timeAdvancesInScripts reports whether Redis TIME moves during a script
// (Redis before 7.2; from 7.2 on, and in Valkey, it is frozen at the
// script's start).
func timeAdvancesInScripts(t *testing.T) bool {
	t.Helper()
	v, err := redistest.Bulk(srv.Addr(t), "EVAL", `local a = redis.call('TIME')
local x = 0
for i = 1, 2000000 do x = x + i end
local b = redis.call('TIME')
return tostring((b[1] - a[1]) * 1000000 + (b[2] - a[2]))`, "0")
	if err != nil {
		t.Fatal(err)
	}
	return v != "0"
}

// A booking's Wait counts from when Take returns, not from when the script
// that decided it started: a caller that acts Wait after Take returns is
// neither early nor late by the script's own time (here a long one: one
// request booking on 3,000 buckets, on Redis's clock). Where Redis
// freezes TIME in scripts (7.2 on) only "never early" holds.
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
	if !timeAdvancesInScripts(t) {
		// The script cannot tell how long it ran: its waits count from its
		// start, late by its run time (never early, checked above).
		t.Logf("this Redis freezes TIME in scripts (7.2 and later): the script's run time is not taken off")
		if late > took {
			t.Fatalf("acting Wait (%v) after Take returns is %v late or more, more than the %v the booking took", r.Wait, late, took)
		}
		return
	}
	if late > took/2 {
		t.Fatalf("acting Wait (%v) after Take returns is %v late or more, of the %v the booking took: the wait counts from the script's start", r.Wait, late, took)
	}
}
