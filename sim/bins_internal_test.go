// Tests of the plot's bins: widths and units chosen from the span, and points drawn bounded whatever the trace's length.
package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
)

func TestScaleFromSpan(t *testing.T) {
	for _, c := range []struct {
		end      float64
		width    time.Duration
		timeName string
		rateName string
	}{
		{0.1, 100 * time.Millisecond, "s", "second"},
		{19.6, 100 * time.Millisecond, "s", "second"}, // docs/policy.md's pulse: 5 admissions per 100 ms bin
		{60, 100 * time.Millisecond, "s", "second"},
		{60.1, 200 * time.Millisecond, "s", "second"},
		{3600, 10 * time.Second, "min", "second"},
		{72 * 3600, 10 * time.Minute, "h", "minute"}, // docs/policy.md's quota trace
		{30 * 86400, 2 * time.Hour, "days", "hour"},
		{600 * 86400, 24 * time.Hour, "days", "hour"},
		{601 * 86400, 48 * time.Hour, "days", "hour"},
		{200 * 365 * 86400, 122 * 24 * time.Hour, "days", "hour"},
	} {
		s := scaleFor(c.end)
		if s.width != c.width || s.timeName != c.timeName || s.rateName != c.rateName {
			t.Errorf("span %v s: %v bins, time in %s, rates per %s; want %v, %s, %s", c.end, s.width, s.timeName, s.rateName, c.width, c.timeName, c.rateName)
		}
		if bins := int(time.Duration(c.end*1e9)/s.width) + 1; bins > MaxPlotBins+1 {
			t.Errorf("span %v s: %d bins of %v", c.end, bins, s.width)
		}
	}
}

// spanTrace replays docs/policy.md's quota policy (examples/quotas.yaml) over
// a steady trace of d seconds.
func spanTrace(t *testing.T, rate, d float64) []Named {
	t.Helper()
	src, err := os.ReadFile("../examples/quotas.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := Generate("steady", GenerateOptions{Rate: rate, Duration: d, Descriptors: map[string]string{"tenant": "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := RunFrom(p, evs, time.Date(2026, 3, 28, 12, 0, 0, 0, time.FixedZone("", 3600)))
	if err != nil {
		t.Fatal(err)
	}
	return []Named{{Name: "policy", Report: rep}}
}

// The points a figure draws are bounded whatever the trace's length (the
// docs/policy.md's 72 h quota trace drew 2.6 million per rate line in 100 ms
// bins), and the panels say the bins and units they use.
func TestPlotPointsBoundedWhateverTheSpan(t *testing.T) {
	for _, c := range []struct {
		name     string
		rate, d  float64
		title    string
		timeAxis string
	}{
		{"20 s", 50, 20, "requests per second (100 ms bins)", "time (s)"},
		{"72 h", 0.01, 72 * 3600, "requests per minute (10 min bins)", "time (h)"},
		{"90 days", 0.001, 90 * 86400, "requests per hour (6 h bins)", "time (days)"},
	} {
		runs := spanTrace(t, c.rate, c.d)
		fig, err := build(runs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		total := 0
		for _, row := range fig.panels {
			for _, p := range row {
				if p.p.X.Label.Text != c.timeAxis {
					t.Errorf("%s: x axis %q, want %q", c.name, p.p.X.Label.Text, c.timeAxis)
				}
				for _, l := range p.lines {
					limit := MaxPlotBins + 1 // a rate line: one point per bin
					if p.tokens {
						limit = 2*(MaxPlotBins+1) + 1
					}
					if len(l.XYs) > limit {
						t.Errorf("%s %q: a line of %d points, want at most %d", c.name, p.p.Title.Text, len(l.XYs), limit)
					}
					total += len(l.XYs)
				}
			}
		}
		if rate := fig.panels[0][0]; rate.p.Title.Text != c.title {
			t.Errorf("%s: rate panel %q, want %q", c.name, rate.p.Title.Text, c.title)
		}
		t.Logf("%s: %d offered, %d points drawn", c.name, runs[0].Report.Summary.Offered, total)
	}
}

// docs/policy.md's 72 h quota trace, drawn: the rate panel shows the daily
// quota's refusals as admitted falling to 0 per minute while 0.6 per
// minute are offered (SLUICE_PLOT_DIR keeps the pictures to look at).
func TestPlotQuotaTrace(t *testing.T) {
	runs := spanTrace(t, 0.01, 72*3600)
	fig, err := build(runs)
	if err != nil {
		t.Fatal(err)
	}
	offered, admitted := fig.panels[0][0].lines[0].XYs, fig.panels[0][0].lines[1].XYs
	zero, full := 0, 0
	for i := range offered {
		if offered[i].Y < 0.59 || offered[i].Y > 0.61 {
			if i != len(offered)-1 { // (the last bin is cut short by the trace's end)
				t.Fatalf("bin %d at %v h: offered %v/min, want 0.6 (6 per 10 min)", i, offered[i].X, offered[i].Y)
			}
		}
		switch admitted[i].Y {
		case 0:
			zero++
		case offered[i].Y:
			full++
		}
	}
	if zero == 0 || full == 0 {
		t.Fatalf("admitted: %d bins at 0, %d at the offered rate; the daily quota refuses part of each day", zero, full)
	}
	dir := os.Getenv("SLUICE_PLOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	for _, c := range []struct {
		file string
		runs []Named
	}{{"quota-72h.png", runs}, {"quota-20s.png", spanTrace(t, 50, 20)}} {
		path := filepath.Join(dir, c.file)
		if err := Plot(path, c.runs); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() == 0 || !strings.HasSuffix(path, ".png") {
			t.Fatalf("%s: %v %v", path, st, err)
		}
	}
}
