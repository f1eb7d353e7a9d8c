package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

const classesSrc = `
priorities:
  - name: interactive
  - name: standard
    reserve: 0.2
    max_queue_ms: 2000
  - name: batch
    reserve: 0.5
    max_queue_ms: 0
default_priority: standard
limits:
  - name: api
    key: "global"
    capacity: 10
    refill_per_second: 1
`

// A class sees its limit cut by its reserve and its line cut to its
// max_queue_ms; the default class applies to a request naming none; an
// unknown class takes nothing.
func TestPriorityClasses(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	l := limiterOver(t, classesSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	check := func(class string, cost int64, wait time.Duration) limiter.Result {
		t.Helper()
		res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: cost, Priority: class, MaxWait: wait, Reserve: wait > 0})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// batch: at most the 5 tokens above its reserve of half.
	if r := check("batch", 5, 0); !r.Allowed || r.Priority != "batch" || r.Limits[0].Priority != "batch" || r.Limits[0].TokensRemaining != 0 {
		t.Fatalf("batch 5: %+v", r)
	}
	if r := check("batch", 1, time.Minute); r.Allowed { // max_queue_ms 0: never waits
		t.Fatalf("batch 1 more: %+v", r)
	} else if r.RetryAfter != time.Second {
		t.Errorf("batch's retry: %v, want 1s (its reserve is 5 tokens: one more is there in 1 s)", r.RetryAfter)
	}
	// standard (the default): down to 20 % (2 tokens) left: 3 more.
	if r := check("", 3, 0); !r.Allowed || r.Priority != "standard" || r.Limits[0].TokensRemaining != 0 {
		t.Fatalf("standard 3: %+v", r)
	}
	if r := check("", 1, 0); r.Allowed {
		t.Fatalf("standard 1 more: %+v", r)
	}
	// standard may book up to 2 s of refill: 2 tokens, not 3.
	if r := check("standard", 3, time.Minute); r.Allowed {
		t.Fatalf("standard books 3 (3 s): %+v", r)
	}
	if r := check("standard", 2, time.Minute); !r.Allowed || r.Wait != 2*time.Second {
		t.Fatalf("standard books 2: %+v", r)
	}
	// interactive: the whole bucket, the line as deep as its max_wait.
	if r := check("interactive", 2, 0); r.Allowed {
		t.Fatalf("interactive 2 (all 2 left are booked): %+v", r)
	}
	if r := check("interactive", 2, 0); r.Allowed {
		t.Fatalf("%+v", r)
	}
	c.Advance(2 * time.Second)
	if r := check("interactive", 2, 0); !r.Allowed || r.Priority != "interactive" {
		t.Fatalf("interactive 2 after 2 s: %+v", r)
	}
	if r := check("interactive", 10, time.Minute); !r.Allowed || r.Wait != 10*time.Second {
		t.Fatalf("interactive books 10: %+v", r)
	}
	_, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Priority: "bulk"})
	var ue *policy.UnknownPriorityError
	if !errors.Is(err, policy.ErrUnknownPriority) || !errors.As(err, &ue) || ue.Name != "bulk" {
		t.Fatalf("unknown class: %v", err)
	}
}

// sluice_decisions_total counts a class's decisions under its priority
// label ("" for a request with no class); a policy without classes keeps
// the series' labels as they were.
func TestPriorityMetrics(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	reg := prometheus.NewRegistry()
	src := strings.Replace(classesSrc, "default_priority: standard\n", "", 1)
	l := limiterOver(t, src, memstore.New(memstore.WithClock(c)), limiter.WithRegisterer(reg))
	ctx := context.Background()
	for _, class := range []string{"batch", "batch", "", "interactive"} {
		if _, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: 1, Priority: class}); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.Metric {
			lab := map[string]string{}
			for _, p := range m.Label {
				lab[p.GetName()] = p.GetValue()
			}
			if m.Counter.GetValue() > 0 {
				fmt.Fprintf(&b, "%s/%s/%s/%q=%v ", lab["limit"], lab["result"], lab["attempt"], lab["priority"], m.Counter.GetValue())
			}
		}
	}
	if got, want := b.String(), `api/admitted/original/""=1 api/admitted/original/"batch"=2 api/admitted/original/"interactive"=1 `; got != want {
		t.Errorf("series %s, want %s", got, want)
	}
	reg2 := prometheus.NewRegistry()
	plain := limiterOver(t, "limits:\n  - name: api\n    key: global\n    capacity: 10\n    refill_per_second: 1\n", memstore.New(memstore.WithClock(c)), limiter.WithRegisterer(reg2))
	if _, err := plain.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg2, "sluice_decisions_total"); err != nil || n != 6 {
		t.Errorf("no classes: %d series, %v", n, err)
	}
	want := "# HELP sluice_decisions_total Admission decisions per limit, by result (admitted/rejected) and attempt (original/retry).\n# TYPE sluice_decisions_total counter\n"
	for _, r := range []string{"admitted", "rejected", "shadow_rejected"} {
		for _, a := range []string{"original", "retry"} {
			v := 0
			if r == "admitted" && a == "original" {
				v = 1
			}
			want += fmt.Sprintf("sluice_decisions_total{attempt=%q,limit=\"api\",result=%q} %d\n", a, r, v)
		}
	}
	if err := testutil.GatherAndCompare(reg2, strings.NewReader(want), "sluice_decisions_total"); err != nil {
		t.Errorf("no classes: the series as before: %v", err)
	}
}

// The bound on waiting: standard (max_queue_ms 2000) floods the
// line at 10x the refill, booking as deep as its class allows, while
// interactive calls wait in the same line; no interactive call waits more
// than 2 s + one refill (1/r), however deep standard books.
func TestPriorityWaitBound(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	l := limiterOver(t, strings.Replace(classesSrc, "refill_per_second: 1\n", "refill_per_second: 100\n", 1), memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	worst, calls := time.Duration(0), 0
	for step := range 5000 { // 5 s, a ms each
		c.Advance(time.Millisecond)
		res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: 1, Priority: "standard", MaxWait: time.Minute, Reserve: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed && res.Wait > 2*time.Second {
			t.Fatalf("standard booked %v deep, beyond its 2 s", res.Wait)
		}
		if step%50 == 0 {
			res, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: 1, Priority: "interactive", MaxWait: time.Minute, Reserve: true})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed {
				t.Fatalf("interactive refused at %d ms: %+v", step, res)
			}
			worst, calls = max(worst, res.Wait), calls+1
		}
	}
	t.Logf("%d interactive calls, the longest wait %v", calls, worst)
	if worst > 2*time.Second+10*time.Millisecond {
		t.Errorf("an interactive call waited %v, more than 2 s + one refill (10 ms)", worst)
	}
}
