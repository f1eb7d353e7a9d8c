package policy

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const priorityPolicy = `
priorities:                 # optional; listed from highest to lowest
  - name: interactive       # reserve 0, depth unbounded: today's behaviour
  - name: standard
    reserve: 0.2            # may not use the last 20 % of a bucket's capacity
    max_queue_ms: 2000      # may book at most 2 s of refill deep into the line
  - name: batch
    reserve: 0.5
    max_queue_ms: 0         # never waits: admitted only from tokens above its reserve
default_priority: standard
limits:
  - name: api
    key: "user:{user}"
    capacity: 10
    refill_per_second: 1
`

// The example parses into its three classes, exactly.
func TestPriorities(t *testing.T) {
	p, err := Parse([]byte(priorityPolicy))
	if err != nil {
		t.Fatal(err)
	}
	want := []Priority{
		{Name: "interactive"},
		{Name: "standard", Reserve: 200_000, MaxQueue: 2 * time.Second, QueueBounded: true},
		{Name: "batch", Reserve: 500_000, QueueBounded: true},
	}
	if len(p.Priorities) != len(want) {
		t.Fatalf("priorities %+v", p.Priorities)
	}
	for i := range want {
		if p.Priorities[i] != want[i] {
			t.Errorf("class %d: %+v, want %+v", i, p.Priorities[i], want[i])
		}
	}
	if c, err := p.Priority(""); err != nil || c.Name != "standard" {
		t.Errorf("default: %+v %v", c, err)
	}
	if c, err := p.Priority("batch"); err != nil || c.MaxWait(time.Minute) != 0 {
		t.Errorf("batch: %+v %v", c, err)
	}
	if c, _ := p.Priority("standard"); c.MaxWait(time.Minute) != 2*time.Second || c.MaxWait(time.Second) != time.Second {
		t.Errorf("standard's MaxWait: %v", c.MaxWait(time.Minute))
	}
	if c, _ := p.Priority("interactive"); c.MaxWait(time.Minute) != time.Minute {
		t.Errorf("interactive's MaxWait: %v", c.MaxWait(time.Minute))
	}
	_, err = p.Priority("bulk")
	var ue *UnknownPriorityError
	if !errors.Is(err, ErrUnknownPriority) || !errors.As(err, &ue) || ue.Name != "bulk" {
		t.Errorf("unknown: %v", err)
	}
	// No classes: no name is today's behaviour, any name unknown.
	q, err := Parse([]byte("limits:\n  - name: a\n    key: k\n    capacity: 1\n    refill_per_second: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := q.Priority(""); err != nil || c != (Priority{}) {
		t.Errorf("no classes: %+v %v", c, err)
	}
	if _, err := q.Priority("batch"); !errors.Is(err, ErrUnknownPriority) {
		t.Errorf("no classes, a name: %v", err)
	}
}

func TestParseReserve(t *testing.T) {
	for s, want := range map[string]uint32{"0": 0, "0.2": 200_000, ".5": 500_000, "0.125": 125_000, "0.000001": 1, "0.999999": 999_999, "0.20": 200_000, "00.1": 100_000} {
		if got, err := ParseReserve(s); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"1", "1.0", "0.0000001", "-0.1", "1e-1", "", ".", "abc", "0.2x"} {
		if got, err := ParseReserve(s); err == nil {
			t.Errorf("%q: %d, want an error", s, got)
		}
	}
}

func TestPriorityErrors(t *testing.T) {
	const limits = "limits:\n  - name: a\n    key: k\n    capacity: 1\n    refill_per_second: 1\n"
	for src, want := range map[string]string{
		"default_priority: x\n" + limits:                                                       `unknown priority "x"`,
		"priorities:\n  - name: a\n  - name: a\n" + limits:                                     "class given twice",
		"priorities:\n  - name: a\n    reserve: 0.5\n  - name: b\n    reserve: 0.2\n" + limits: "a lower class reserves at least as much",
		"priorities:\n  - name: a\n    max_queue_ms: 10\n  - name: b\n" + limits:               "may queue no deeper",
		"priorities:\n  - name: a\n    reserve: 1.5\n" + limits:                                "must be below 1",
		"priorities:\n  - name: a\n    max_queue_ms: -1\n" + limits:                            "max_queue_ms",
		"priorities:\n  - name: a\n    weight: 1\n" + limits:                                   "unknown field",
		"priorities:\n  - reserve: 0.1\n" + limits:                                             "needs a name",
		"priorities:\n  - name: 'a b'\n" + limits:                                              "not a class name",
		"priorities: batch\n" + limits:                                                         "must be a list",
	} {
		_, err := Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
}
