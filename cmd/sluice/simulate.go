// sluice simulate: a generated trace, or a trace replayed against a policy (outcomes, plot, summary).

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/sim"
)

type simulateCmd struct {
	Config  string `help:"Policy file." type:"path"`
	Trace   string `help:"Trace file, JSON lines ({\"t\": 0.25, \"descriptors\": {...}, \"cost\": 1, \"max_wait_ms\": 0}); - reads stdin."`
	Plot    string `help:"Draw offered vs admitted requests over time (bins chosen from the span: 100 ms up to a minute, at most 600) and tokens remaining to this .png or .svg file."`
	Compare string `help:"Replay under each of these algorithms (comma-separated: token_bucket,sliding_window,fixed_window) at the same capacity and rate, and plot them side by side."`
	Out     string `help:"Write the output (outcomes, or a generated trace) to this file instead of stdout." type:"path"`
	Start   string `help:"Place the trace's time zero on the calendar (RFC 3339, e.g. 2026-03-28T12:00:00+01:00), so that calendar quotas and windows meet real boundaries; outcomes' t stays relative to it." default:"1970-01-01T00:00:00Z"`

	Generate   string            `placeholder:"KIND" help:"Write an example trace instead of simulating: KIND is pulse, steady or burst."`
	N          int               `help:"pulse: requests at t=0; burst: requests per burst." default:"1000"`
	Rate       float64           `help:"steady: requests per second." default:"25"`
	Duration   time.Duration     `help:"steady, burst: length of the trace." default:"30s"`
	Period     time.Duration     `help:"burst: time between bursts." default:"5s"`
	MaxWait    time.Duration     `help:"max_wait_ms of every generated request." default:"0s"`
	Descriptor map[string]string `help:"Descriptors of every generated request (name=value; repeatable)."`
}

// The range of --start: times are Unix nanoseconds (1677-09-21 to
// 2262-04-11), less a century for the trace itself.
var (
	minStart = time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC)
	maxStart = time.Date(2162, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Validate checks the flags before anything is read or written (kong calls
// it after parsing; its error is a usage error, exit status 2).
func (c simulateCmd) Validate() error {
	switch c.Generate {
	case "":
		if c.Config == "" || c.Trace == "" {
			return errors.New("needs --config and --trace (or --generate)")
		}
	case "pulse", "steady", "burst":
	default:
		return fmt.Errorf("--generate %q: want pulse, steady or burst", c.Generate)
	}
	if st, err := time.Parse(time.RFC3339Nano, c.Start); err != nil {
		return fmt.Errorf("--start %q: want an RFC 3339 time such as 2026-03-28T12:00:00+01:00", c.Start)
	} else if st.Before(minStart) || st.After(maxStart) {
		return fmt.Errorf("--start %q: outside the times the simulator represents (%s to %s)", c.Start,
			minStart.Format(time.DateOnly), maxStart.Format(time.DateOnly))
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("--max-wait %v: must be 0 (no waiting) or more", c.MaxWait)
	}
	if ext := strings.ToLower(filepath.Ext(c.Plot)); c.Plot != "" && ext != ".png" && ext != ".svg" {
		return fmt.Errorf("--plot %q: the file must end in .png or .svg", c.Plot)
	}
	if c.Compare != "" {
		for _, a := range strings.Split(c.Compare, ",") {
			if !slices.Contains(sim.Algorithms, strings.TrimSpace(a)) {
				return fmt.Errorf("--compare: unknown algorithm %q (want token_bucket, sliding_window or fixed_window)", strings.TrimSpace(a))
			}
		}
	}
	return nil
}

// Run writes the generated trace (--generate), or replays --trace against
// --config and writes the outcomes, the plot and a summary.
func (c simulateCmd) Run(e *env) error {
	if c.Generate != "" {
		return c.generate(e)
	}
	p, err := policy.Load(c.Config)
	if err != nil {
		return err
	}
	var in io.Reader = e.stdin
	if c.Trace != "-" {
		f, err := os.Open(c.Trace)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	evs, err := sim.ReadTrace(in)
	if err != nil {
		return err
	}
	algos := []string{""}
	if c.Compare != "" {
		algos = strings.Split(c.Compare, ",")
	}
	var runs []sim.Named
	var out bytes.Buffer
	for _, a := range algos {
		pp, name := p, "policy"
		if a != "" {
			a = strings.TrimSpace(a)
			if pp, err = sim.As(p, a); err != nil {
				return err
			}
			name = a
		}
		start, _ := time.Parse(time.RFC3339Nano, c.Start) // (checked by Validate)
		rep, err := sim.RunFrom(pp, evs, start)
		if err != nil {
			return err
		}
		if a != "" {
			for i := range rep.Outcomes {
				rep.Outcomes[i].Algorithm = a
			}
		}
		if err := sim.WriteOutcomes(&out, rep.Outcomes); err != nil {
			return err
		}
		runs = append(runs, sim.Named{Name: name, Report: rep})
	}
	if c.Plot != "" {
		if err := sim.Plot(c.Plot, runs); err != nil {
			return err
		}
	}
	if err := c.write(e, out.Bytes()); err != nil {
		return err
	}
	for _, r := range runs {
		s := r.Report.Summary
		fmt.Fprintf(e.stderr, "%s: offered %d, admitted %d, rejected %d, peak admitted %d/s\n", r.Name, s.Offered, s.Admitted, s.Rejected, s.PeakAdmittedPerS)
		names := make([]string, 0, len(s.RejectedPerLimit))
		for n := range s.RejectedPerLimit {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(e.stderr, "  rejected by %s: %d\n", n, s.RejectedPerLimit[n])
		}
	}
	return nil
}

func (c simulateCmd) generate(e *env) error {
	evs, err := sim.Generate(c.Generate, sim.GenerateOptions{
		N: c.N, Rate: c.Rate, Duration: c.Duration.Seconds(), Period: c.Period.Seconds(),
		MaxWaitMS: c.MaxWait.Milliseconds(), Descriptors: c.Descriptor,
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	for _, ev := range evs {
		b, _ := jsonLine(ev)
		out.Write(b)
	}
	return c.write(e, out.Bytes())
}

// write puts the whole output in place at once: a file is written to a
// temporary name and renamed, so nothing is half-written.
func (c simulateCmd) write(e *env, b []byte) error {
	if c.Out == "" {
		_, err := e.stdout.Write(b)
		return err
	}
	tmp := c.Out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.Out)
}
