package sim

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/sluicehq/sluice/policy"
)

// Two limits whose capacities differ fifty-fold; the small one refuses.
const twoLimits = `
limits:
  - name: big
    key: "global"
    capacity: 1000
    refill_per_second: 500
  - name: small
    key: "global"
    capacity: 20
    refill_per_second: 50
`

// replay runs the trace kind under src, once per algorithm (none: the
// policy as written).
func replay(t *testing.T, src, kind string, o GenerateOptions, algorithms ...string) []Named {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := Generate(kind, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(algorithms) == 0 {
		algorithms = []string{""}
	}
	var runs []Named
	for _, a := range algorithms {
		pp, name := p, "policy"
		if a != "" {
			if pp, err = As(p, a); err != nil {
				t.Fatal(err)
			}
			name = a
		}
		rep, err := Run(pp, evs)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, Named{Name: name, Report: rep})
	}
	return runs
}

// figures are the cases every property is checked on: a steady trace no
// limit refuses (no series touches 0), docs/policy.md's pulse under each
// algorithm, and bursts against two limits of very different capacities.
// They are replayed once and shared: build and draw only read them.
func figures(t *testing.T) map[string][]Named {
	t.Helper()
	cases.Lock()
	defer cases.Unlock()
	if cases.runs != nil {
		return cases.runs
	}
	cases.runs = map[string][]Named{
		"steady": replay(t, twoLimits, "steady", GenerateOptions{Rate: 25, Duration: 5}),
		"pulse compare": replay(t, pulsePolicyForPlots, "pulse", GenerateOptions{N: 1000, MaxWaitMS: 30_000},
			"token_bucket", "sliding_window", "fixed_window"),
		"bursts": replay(t, twoLimits, "burst", GenerateOptions{N: 200, Period: 2, Duration: 6, MaxWaitMS: 500}),
	}
	return cases.runs
}

var cases struct {
	sync.Mutex
	runs map[string][]Named
}

const pulsePolicyForPlots = `
limits:
  - name: llm
    key: "global"
    capacity: 20
    refill_per_second: 50
`

func eachPanel(t *testing.T, f func(t *testing.T, name string, runs []Named, fig *figure)) {
	for name, runs := range figures(t) {
		fig, err := build(runs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f(t, name, runs, fig)
	}
}

func TestPlotAxesStartAtZero(t *testing.T) {
	eachPanel(t, func(t *testing.T, name string, _ []Named, fig *figure) {
		for j, row := range fig.panels {
			for i, p := range row {
				if p.p.X.Min != 0 || p.p.Y.Min != 0 {
					t.Errorf("%s panel %d,%d (%q): x from %v, y from %v; want both from 0", name, j, i, p.p.Title.Text, p.p.X.Min, p.p.Y.Min)
				}
				if p.p.Y.Max <= 0 || p.p.X.Max <= 0 {
					t.Errorf("%s panel %d,%d: empty range x to %v, y to %v", name, j, i, p.p.X.Max, p.p.Y.Max)
				}
			}
		}
	})
}

// checkTicks wants at least five labelled ticks in the axis's range, evenly
// spaced by 1, 2 or 5 times a power of ten, each label its value.
func checkTicks(ax plot.Axis) error {
	var labelled []plot.Tick
	for _, tk := range ax.Tick.Marker.Ticks(ax.Min, ax.Max) {
		if tk.Label != "" && tk.Value >= ax.Min && tk.Value <= ax.Max {
			labelled = append(labelled, tk)
		}
	}
	if len(labelled) < 5 {
		return fmt.Errorf("%d labelled ticks in [%v, %v]: %v, want at least 5", len(labelled), ax.Min, ax.Max, labelled)
	}
	step := labelled[1].Value - labelled[0].Value
	mant := step / math.Pow10(int(math.Floor(math.Log10(step)+1e-9)))
	if math.Abs(mant-1) > 1e-6 && math.Abs(mant-2) > 1e-6 && math.Abs(mant-5) > 1e-6 {
		return fmt.Errorf("step %v is not 1, 2 or 5 times a power of ten", step)
	}
	for k, tk := range labelled {
		if q := tk.Value / step; math.Abs(q-math.Round(q)) > 1e-6 {
			return fmt.Errorf("tick %v is not a multiple of the step %v", tk.Value, step)
		}
		if k > 0 && math.Abs(tk.Value-labelled[k-1].Value-step) > 1e-6*step {
			return fmt.Errorf("ticks %v and %v are not %v apart", labelled[k-1].Value, tk.Value, step)
		}
		v, err := strconv.ParseFloat(tk.Label, 64)
		if err != nil || math.Abs(v-tk.Value) > 1e-6*step || (tk.Value >= 0 && strings.HasPrefix(tk.Label, "-")) {
			return fmt.Errorf("tick %v is labelled %q", tk.Value, tk.Label)
		}
	}
	return nil
}

func TestPlotTicks(t *testing.T) {
	eachPanel(t, func(t *testing.T, name string, _ []Named, fig *figure) {
		for j, row := range fig.panels {
			for i, p := range row {
				if err := checkTicks(p.p.X); err != nil {
					t.Errorf("%s panel %d,%d (%q), x axis: %v", name, j, i, p.p.Title.Text, err)
				}
				if err := checkTicks(p.p.Y); err != nil {
					t.Errorf("%s panel %d,%d (%q), y axis: %v", name, j, i, p.p.Title.Text, err)
				}
			}
		}
	})
	// The ticker the panels use, on awkward ranges.
	fig, err := build(figures(t)["steady"])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]float64{{0, 1}, {0, 0.05}, {0, 19.6}, {0, 20.7}, {0, 27.1}, {0, 100}, {0, 480}, {0, 1e6}, {0, 3}, {0, 7}} {
		ax := plot.New().Y
		ax.Tick.Marker, ax.Min, ax.Max = fig.panels[0][0].p.Y.Tick.Marker, r[0], r[1]
		if err := checkTicks(ax); err != nil {
			t.Errorf("[%v, %v]: %v", r[0], r[1], err)
		}
	}
}

// spanEnd is the last instant a run saw anything happen.
func spanEndOf(r *Report) float64 {
	end := 0.0
	for _, o := range r.Outcomes {
		end = max(end, o.T)
		if o.AdmittedAt != nil {
			end = max(end, *o.AdmittedAt)
		}
	}
	for _, s := range r.Samples {
		end = max(end, s.T)
	}
	return end
}

func TestPlotPanelsShareTheTimeRange(t *testing.T) {
	eachPanel(t, func(t *testing.T, name string, runs []Named, fig *figure) {
		end := 0.0
		for _, r := range runs {
			end = max(end, spanEndOf(r.Report))
		}
		end = fig.scale.x(end) // in the axis' unit
		first := fig.panels[0][0].p.X
		if first.Max < end {
			t.Errorf("%s: x ends at %v, before the last run ends (%v)", name, first.Max, end)
		}
		for j, row := range fig.panels {
			for i, p := range row {
				if p.p.X.Min != first.Min || p.p.X.Max != first.Max {
					t.Errorf("%s panel %d,%d (%q): x [%v, %v], panel 0,0: [%v, %v]", name, j, i, p.p.Title.Text, p.p.X.Min, p.p.X.Max, first.Min, first.Max)
				}
			}
		}
	})
	// --compare draws each algorithm in its own panels.
	fig, err := build(figures(t)["pulse compare"])
	if err != nil {
		t.Fatal(err)
	}
	if len(fig.panels) != 3 {
		t.Errorf("pulse compare: %d rows of panels, want one per algorithm (3)", len(fig.panels))
	}
}

func TestPlotTokensInPercentOfCapacity(t *testing.T) {
	capacity := map[string]float64{"big": 1000, "small": 20, "llm": 20}
	eachPanel(t, func(t *testing.T, name string, runs []Named, fig *figure) {
		n := 0
		for j, row := range fig.panels {
			for i, p := range row {
				if !p.tokens {
					continue
				}
				n++
				if p.p.Y.Min != 0 || p.p.Y.Max != 100 {
					t.Errorf("%s panel %d,%d: y [%v, %v], want [0, 100] (%% of capacity)", name, j, i, p.p.Y.Min, p.p.Y.Max)
				}
				run := runs[min(j, len(runs)-1)].Report
				// Every key in these cases is "global": one series per limit,
				// in the order of the limits' names.
				var limits []string
				series := map[string][]Sample{}
				for _, sm := range run.Samples {
					if sm.Key != "global" {
						t.Fatalf("%s: key %q", name, sm.Key)
					}
					if series[sm.Limit] == nil {
						limits = append(limits, sm.Limit)
					}
					series[sm.Limit] = append(series[sm.Limit], sm)
				}
				sort.Strings(limits)
				if len(p.lines) != len(limits) {
					t.Fatalf("%s panel %d,%d: %d lines, want one per limit (%d)", name, j, i, len(p.lines), len(limits))
				}
				for k, limit := range limits {
					var want plotter.XYs
					for _, sm := range series[limit] {
						want = append(want, plotter.XY{X: fig.scale.x(sm.T), Y: 100 * float64(sm.Tokens) / capacity[limit]})
					}
					checkEnvelope(t, name+" "+limit, p.lines[k].XYs, want, fig.scale)
				}
			}
		}
		if n != len(runs) {
			t.Errorf("%s: %d tokens panels, want one per run (%d)", name, n, len(runs))
		}
	})
}

func overlap(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

func TestPlotLegendsCoverNoData(t *testing.T) {
	eachPanel(t, func(t *testing.T, name string, _ []Named, fig *figure) {
		w, h := fig.size()
		placed := fig.draw(draw.New(vgsvg.New(w, h)))
		var datas, legends []vg.Rectangle
		for j, row := range placed {
			for i, pl := range row {
				p := fig.panels[j][i]
				if len(p.legend) != len(p.lines) {
					t.Errorf("%s panel %d,%d: %d legend entries for %d lines", name, j, i, len(p.legend), len(p.lines))
				}
				if r := pl.legend; r.Max.X <= r.Min.X || r.Max.Y <= r.Min.Y || r.Min.X < 0 || r.Min.Y < 0 || r.Max.X > w || r.Max.Y > h {
					t.Errorf("%s panel %d,%d: legend at %v, outside the %v x %v picture or empty", name, j, i, r, w, h)
				}
				datas, legends = append(datas, pl.data), append(legends, pl.legend)
			}
		}
		for a, l := range legends {
			for b, d := range datas {
				if overlap(l, d) {
					t.Errorf("%s: legend %d at %v covers the data area of panel %d at %v", name, a, l, b, d)
				}
			}
			for b, m := range legends[a+1:] {
				if overlap(l, m) {
					t.Errorf("%s: legends %d and %d overlap", name, a, a+1+b)
				}
			}
		}
	})
}

func TestPlotRefusesARunWithoutReport(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.png")
	runs := append(figures(t)["steady"], Named{Name: "empty"})
	if err := Plot(path, runs); err == nil || !strings.Contains(err.Error(), `run "empty" has no report`) {
		t.Fatalf("got %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
	// Nor does the panels' ticker loop or panic on a range it cannot label.
	fig, err := build(figures(t)["steady"])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]float64{{0, math.Inf(1)}, {math.Inf(-1), 0}, {1, 1}, {2, 1}, {0, math.NaN()}} {
		if ticks := fig.panels[0][0].p.Y.Tick.Marker.Ticks(r[0], r[1]); ticks != nil {
			t.Errorf("ticks on [%v, %v]: %v", r[0], r[1], ticks)
		}
	}
}

// checkEnvelope checks that a drawn tokens line is its series (want) or,
// when that has more than 2 points per bin on average, the series' points
// in order holding each bin's lowest and highest values and its last
// point: never more than 2 per bin, plus one.
func checkEnvelope(t *testing.T, what string, got, want plotter.XYs, sc scale) {
	t.Helper()
	w := float64(sc.width) / float64(sc.timeUnit)
	bins := int(want[len(want)-1].X/w) + 1
	if len(want) <= 2*bins {
		if len(got) != len(want) {
			t.Fatalf("%s: %d points, want the %d samples", what, len(got), len(want))
		}
		for m := range want {
			if math.Abs(got[m].Y-want[m].Y) > 1e-9 || got[m].X != want[m].X {
				t.Fatalf("%s point %d: %v, want %v", what, m, got[m], want[m])
			}
		}
		return
	}
	if len(got) > 2*bins+1 {
		t.Fatalf("%s: %d points for %d bins, want at most %d", what, len(got), bins, 2*bins+1)
	}
	lo, hi := map[int]float64{}, map[int]float64{}
	for _, p := range want {
		b := int(p.X / w)
		if v, ok := lo[b]; !ok || p.Y < v {
			lo[b] = p.Y
		}
		if v, ok := hi[b]; !ok || p.Y > v {
			hi[b] = p.Y
		}
	}
	gotLo, gotHi := map[int]float64{}, map[int]float64{}
	m := 0
	for _, p := range got {
		for m < len(want) && want[m] != p {
			m++
		}
		if m == len(want) {
			t.Fatalf("%s: drawn point %v is not a sample, in order", what, p)
		}
		b := int(p.X / w)
		if v, ok := gotLo[b]; !ok || p.Y < v {
			gotLo[b] = p.Y
		}
		if v, ok := gotHi[b]; !ok || p.Y > v {
			gotHi[b] = p.Y
		}
	}
	for b := range lo {
		if gotLo[b] != lo[b] || gotHi[b] != hi[b] {
			t.Fatalf("%s bin %d: drawn [%v, %v], the samples' [%v, %v]", what, b, gotLo[b], gotHi[b], lo[b], hi[b])
		}
	}
	if got[len(got)-1] != want[len(want)-1] {
		t.Fatalf("%s: ends at %v, the series at %v", what, got[len(got)-1], want[len(want)-1])
	}
}
