// Package sim replays a trace of requests against a policy on virtual
// time, so that an operator can choose capacities and rates from evidence
// before deploying: which requests would be admitted, when, and why not.
//
// A trace is JSON lines, one request each, in time order:
//
//	{"t": 0.25, "descriptors": {"tenant": "acme"}, "cost": 1, "max_wait_ms": 0}
//
// t is in seconds from the start (non-decreasing); cost is optional (absent:
// the policy's cost for the descriptors; 0: a peek); "costs": {"tpm": 1200}
// gives limits their own cost (limiter.Request.Costs); max_wait_ms lets the
// request wait, up to that long, for admission, as the service does: it
// books its turn in its token buckets (FIFO by arrival: admitted at its
// turn), and a request refused by a kind that cannot book (a window) is
// tried again after its RetryAfter, in arrival order among requests due at
// the same instant.
package sim

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

// Event is one line of a trace.
type Event struct {
	T           float64           `json:"t"`
	Descriptors map[string]string `json:"descriptors"`
	Cost        *int64            `json:"cost,omitempty"`
	Costs       map[string]int64  `json:"costs,omitempty"`
	MaxWaitMS   int64             `json:"max_wait_ms,omitempty"`
}

// MaxLine bounds one trace line (64 KiB).
const MaxLine = 64 << 10

// ReadTrace reads and validates a whole trace. Errors name the line:
// malformed JSON, unknown fields, time going backwards, negative or
// non-finite times, negative costs or waits, lines over MaxLine.
func ReadTrace(r io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLine)
	var evs []Event
	last := 0.0
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e Event
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("trace line %d: %v", n, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("trace line %d: more than one JSON value", n)
		}
		switch {
		case math.IsNaN(e.T) || math.IsInf(e.T, 0) || e.T < 0 || e.T > 1e9:
			return nil, fmt.Errorf("trace line %d: t %v must be a time in seconds from 0 to 1e9", n, e.T)
		case e.T < last:
			return nil, fmt.Errorf("trace line %d: t %v goes back in time (previous line: %v)", n, e.T, last)
		case e.Cost != nil && *e.Cost < 0:
			return nil, fmt.Errorf("trace line %d: cost %d is negative", n, *e.Cost)
		case e.MaxWaitMS < 0:
			return nil, fmt.Errorf("trace line %d: max_wait_ms %d is negative", n, e.MaxWaitMS)
		}
		for name, c := range e.Costs {
			if c < 0 {
				return nil, fmt.Errorf("trace line %d: cost %d for limit %q is negative", n, c, name)
			}
		}
		last = e.T
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("trace line %d: longer than %d bytes", len(evs)+1, MaxLine)
		}
		return nil, fmt.Errorf("trace: %w", err)
	}
	return evs, nil
}

// Outcome is the fate of one request.
type Outcome struct {
	Algorithm    string                `json:"algorithm,omitempty"` // set by --compare
	T            float64               `json:"t"`
	Allowed      bool                  `json:"allowed"`
	AdmittedAt   *float64              `json:"admitted_at"` // null when refused
	RetryAfterMS int64                 `json:"retry_after_ms"`
	Limits       []limiter.LimitStatus `json:"limits"`
	Error        string                `json:"error,omitempty"` // e.g. a cost above a capacity
}

// Sample is the tokens remaining of one limit key after a decision.
type Sample struct {
	T      float64
	Limit  string
	Key    string
	Tokens int64
}

// Report is a replay's outcomes and the series drawn from them.
type Report struct {
	Outcomes []Outcome
	Samples  []Sample
	Summary  Summary
}

// Summary totals a replay.
type Summary struct {
	Offered           int            `json:"offered"`
	Admitted          int            `json:"admitted"`
	Rejected          int            `json:"rejected"`
	RejectedPerLimit  map[string]int `json:"rejected_per_limit"`
	PeakAdmittedPerS  int            `json:"peak_admitted_per_second"`
	OfferedPerSecond  []int          `json:"-"`
	AdmittedPerSecond []int          `json:"-"`
}

// Run replays evs against p on virtual time, time zero at the Unix epoch
// (RunFrom with time.Unix(0, 0)).
func Run(p *policy.Policy, evs []Event) (*Report, error) { return RunFrom(p, evs, time.Unix(0, 0)) }

// RunFrom replays evs against p on virtual time whose zero is start on the
// calendar: windows (aligned to the Unix epoch) and calendar quotas meet
// their boundaries where start places them. The outcomes' T stays
// relative to start.
func RunFrom(p *policy.Policy, evs []Event, start time.Time) (*Report, error) {
	epoch := start
	clock := sluice.NewManualClock(epoch)
	st := memstore.New(memstore.WithClock(clock))
	defer st.Close()
	lim, err := limiter.New(p, st)
	if err != nil {
		return nil, err
	}
	rep := &Report{Outcomes: make([]Outcome, len(evs)), Summary: Summary{RejectedPerLimit: map[string]int{}}}
	q := &queue{}
	for i, e := range evs {
		heap.Push(q, pending{at: e.T, seq: i, idx: i})
	}
	ctx := context.Background()
	for q.Len() > 0 {
		pe := heap.Pop(q).(pending)
		e := evs[pe.idx]
		clock.Set(epoch.Add(secs(pe.at)))
		req := limiter.Request{Descriptors: e.Descriptors, Costs: e.Costs, Retry: pe.at > e.T}
		if left := secs(float64(e.MaxWaitMS)/1000 - (pe.at - e.T)); e.MaxWaitMS > 0 && left > 0 {
			req.MaxWait, req.Reserve = left, true // book the turn, as the service does
		}
		if e.Cost != nil {
			if *e.Cost == 0 {
				req.Peek = true
			} else {
				req.Cost = *e.Cost
			}
		}
		res, err := lim.Check(ctx, req)
		out := &rep.Outcomes[pe.idx]
		out.T = e.T
		if err != nil {
			out.Error = err.Error()
			continue
		}
		out.Limits = res.Limits
		if res.Allowed {
			at := round(pe.at + res.Wait.Seconds())
			out.Allowed, out.AdmittedAt, out.RetryAfterMS = true, &at, 0
			if res.Slots.ID != "" {
				// The simulated call returns at once.
				lim.Release(ctx, res.Slots)
			}
		} else {
			out.RetryAfterMS = limiter.CeilMS(res.RetryAfter)
			waited := pe.at - e.T
			if next := pe.at + res.RetryAfter.Seconds(); res.RetryAfter > 0 && (next-e.T)*1000 <= float64(e.MaxWaitMS)+1e-9 && waited >= 0 {
				heap.Push(q, pending{at: next, seq: pe.idx, idx: pe.idx}) // arrival order among equals
				continue
			}
		}
		for _, s := range res.Limits {
			rep.Samples = append(rep.Samples, Sample{T: pe.at, Limit: s.Name, Key: s.Key, Tokens: s.TokensRemaining})
		}
	}
	rep.Summary = summarize(evs, rep.Outcomes)
	return rep, nil
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

func round(s float64) float64 { return math.Round(s*1e9) / 1e9 }

func summarize(evs []Event, outs []Outcome) Summary {
	s := Summary{Offered: len(evs), RejectedPerLimit: map[string]int{}}
	var end float64
	for _, o := range outs {
		end = math.Max(end, o.T)
		if o.AdmittedAt != nil {
			end = math.Max(end, *o.AdmittedAt)
		}
	}
	n := int(end) + 1
	s.OfferedPerSecond, s.AdmittedPerSecond = make([]int, n), make([]int, n)
	for _, o := range outs {
		s.OfferedPerSecond[int(o.T)]++
		if o.Allowed {
			s.Admitted++
			s.AdmittedPerSecond[int(*o.AdmittedAt)]++
			continue
		}
		s.Rejected++
		for _, l := range o.Limits {
			if !l.Allowed {
				s.RejectedPerLimit[l.Name]++
			}
		}
		if o.Error != "" {
			s.RejectedPerLimit["(error)"]++
		}
	}
	for _, a := range s.AdmittedPerSecond {
		s.PeakAdmittedPerS = max(s.PeakAdmittedPerS, a)
	}
	return s
}

type pending struct {
	at  float64
	seq int
	idx int
}

type queue []pending

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(pending)) }
func (q *queue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// WriteOutcomes writes one JSON line per request.
func WriteOutcomes(w io.Writer, outs []Outcome) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range outs {
		if err := enc.Encode(&outs[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}
