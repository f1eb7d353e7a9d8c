package sim_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/sim"
)

const pulsePolicy = `
limits:
  - name: llm
    key: "global"
    capacity: 20
    refill_per_second: 50
`

func pulse(t *testing.T, algorithm string, maxWaitMS int64) *sim.Report {
	t.Helper()
	p, err := policy.Parse([]byte(pulsePolicy))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = sim.As(p, algorithm); err != nil {
		t.Fatal(err)
	}
	evs, err := sim.Generate("pulse", sim.GenerateOptions{N: 1000, MaxWaitMS: maxWaitMS})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sim.Run(p, evs)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The pulse of docs/behaviour.md section 3: 1000 simultaneous requests,
// r=50/s, B=20, room to wait. The token bucket admits all, smoothly at
// ~50/s; the fixed window admits in bursts at each boundary (a saw-tooth).
func TestPulseExperiment(t *testing.T) {
	tb := pulse(t, "token_bucket", 30_000)
	if tb.Summary.Admitted != 1000 || tb.Summary.Rejected != 0 {
		t.Fatalf("token bucket: %+v", tb.Summary)
	}
	last := 0.0
	for _, o := range tb.Outcomes {
		last = max(last, *o.AdmittedAt)
	}
	if last != 19.6 {
		t.Fatalf("last admitted at %v, want 19.6", last)
	}
	_, tbRate := sim.Rates(tb)
	_, fwRate := sim.Rates(pulse(t, "fixed_window", 30_000))
	peak := func(xy []struct{ X, Y float64 }) float64 {
		m := 0.0
		for _, p := range xy[1:] { // after the initial burst
			m = max(m, p.Y)
		}
		return m
	}
	conv := func(r interface {
		Len() int
		XY(int) (float64, float64)
	}) []struct{ X, Y float64 } {
		out := make([]struct{ X, Y float64 }, r.Len())
		for i := range out {
			out[i].X, out[i].Y = r.XY(i)
		}
		return out
	}
	tbPeak, fwPeak := peak(conv(tbRate)), peak(conv(fwRate))
	if tbPeak > 60 || fwPeak < 150 {
		t.Fatalf("peak rates after t=0: token bucket %v/s (want ~50), fixed window %v/s (want bursts of 20 per 0.1 s)", tbPeak, fwPeak)
	}
	zeros := 0
	for _, p := range conv(fwRate)[1:] {
		if p.Y == 0 {
			zeros++
		}
	}
	if zeros < 100 {
		t.Fatalf("fixed window: %d empty bins, want a saw-tooth", zeros)
	}
	// Without room to wait both refuse most of the pulse at once.
	if s := pulse(t, "token_bucket", 0).Summary; s.Admitted != 20 || s.RejectedPerLimit["llm"] != 980 {
		t.Fatalf("no waiting: %+v", s)
	}
}

func TestReadTraceErrorsNameTheLine(t *testing.T) {
	for src, want := range map[string]string{
		"{\"t\": 0}\n{\"t\": 1,}\n":                          "trace line 2:",
		"{\"t\": 1}\n{\"t\": 0.5}\n":                         "trace line 2: t 0.5 goes back in time",
		"{\"t\": 0, \"cost\": -1}\n":                         "trace line 1: cost -1 is negative",
		"{\"t\": -1}\n":                                      "trace line 1: t -1",
		"{\"t\": 0, \"colour\": 1}\n":                        `trace line 1: json: unknown field "colour"`,
		"{\"t\": 0}\n\n{\"t\": 0, \"max_wait_ms\": -5}\n":    "trace line 3: max_wait_ms -5 is negative",
		"{\"t\": 0} {\"t\": 1}\n":                            "trace line 1: more than one JSON value",
		"{\"t\": 0}\n" + strings.Repeat("x", sim.MaxLine+10): "trace line 2: longer than",
	} {
		if _, err := sim.ReadTrace(strings.NewReader(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", src, err, want)
		}
	}
	evs, err := sim.ReadTrace(strings.NewReader("{\"t\": 0.25, \"descriptors\": {\"tenant\": \"acme\"}, \"cost\": 1, \"max_wait_ms\": 0}\n"))
	if err != nil || len(evs) != 1 || evs[0].Descriptors["tenant"] != "acme" || *evs[0].Cost != 1 {
		t.Fatalf("%+v %v", evs, err)
	}
}

func TestPlotWritesPNGAndSVG(t *testing.T) {
	dir := t.TempDir()
	runs := []sim.Named{{Name: "token_bucket", Report: pulse(t, "token_bucket", 30_000)}, {Name: "fixed_window", Report: pulse(t, "fixed_window", 30_000)}}
	for _, name := range []string{"out.png", "out.svg"} {
		path := filepath.Join(dir, name)
		if err := sim.Plot(path, runs); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) < 1000 {
			t.Fatalf("%s: %d bytes, %v", name, len(b), err)
		}
		if name == "out.png" && !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatal("not a PNG")
		}
	}
	if err := sim.Plot(filepath.Join(dir, "out.gif"), runs); err == nil {
		t.Fatal("gif accepted")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("left behind: %v", entries)
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte("{\"t\": 0.25, \"descriptors\": {\"tenant\": \"acme\"}, \"cost\": 1, \"max_wait_ms\": 0}\n"))
	f.Add([]byte("{\"t\": 1}\n{\"t\": 0}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := sim.ReadTrace(bytes.NewReader(b))
		if err != nil {
			if evs != nil {
				t.Fatal("events with an error")
			}
			return
		}
		last := 0.0
		for _, e := range evs {
			if e.T < last || e.T < 0 || (e.Cost != nil && *e.Cost < 0) || e.MaxWaitMS < 0 {
				t.Fatalf("invalid event accepted: %+v", e)
			}
			last = e.T
		}
	})
}

// Waiting requests book their turn as the service does: a cost of 20
// behind a stream of cost-1 requests keeps its place (sleep-and-retry
// would starve it), and per-limit costs ("costs") count per limit.
func TestWaitersBookAndCostsPerLimit(t *testing.T) {
	p, err := policy.Parse([]byte(pulsePolicy + `
  - name: tpm
    key: "k:{k}"
    capacity: 1000
    refill: "1000/m"
`))
	if err != nil {
		t.Fatal(err)
	}
	trace := `{"t": 0, "descriptors": {}, "cost": 20}
{"t": 0.01, "descriptors": {}, "cost": 20, "max_wait_ms": 2000}
`
	for i := range 40 {
		trace += `{"t": ` + strings.TrimRight(strings.TrimRight(fmtSecs(0.02+float64(i)*0.02), "0"), ".") + `, "descriptors": {}, "cost": 1, "max_wait_ms": 2000}` + "\n"
	}
	trace += `{"t": 3, "descriptors": {"k": "a"}, "costs": {"tpm": 900}}
{"t": 3, "descriptors": {"k": "a"}, "costs": {"tpm": 200}}
`
	evs, err := sim.ReadTrace(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sim.Run(p, evs)
	if err != nil {
		t.Fatal(err)
	}
	big := rep.Outcomes[1]
	if !big.Allowed || big.AdmittedAt == nil || *big.AdmittedAt != 0.4 {
		t.Fatalf("the cost-20 waiter is admitted at its turn (0.4 s: 20 tokens at 50/s after the first 20): %+v", big)
	}
	for i, o := range rep.Outcomes[2:42] {
		if !o.Allowed || *o.AdmittedAt < 0.4 {
			t.Fatalf("cost-1 waiter %d overtook the cost-20 one: %+v", i, o)
		}
	}
	if a, b := rep.Outcomes[42], rep.Outcomes[43]; !a.Allowed || b.Allowed || a.Limits[1].TokenCost != 900 || b.Limits[1].TokenCost != 200 {
		t.Fatalf("per-limit costs: %+v %+v", a, b)
	}
}

func fmtSecs(s float64) string { return strconv.FormatFloat(s, 'f', 6, 64) }
