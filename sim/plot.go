package sim

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Named is a report with the name it is drawn under (an algorithm, or the
// policy as written).
type Named struct {
	Name   string
	Report *Report
}

// Bin is the width of the rate series, in seconds: rates are counts per bin
// divided by Bin, so a burst shows as a spike and not as a flat second.
const Bin = 0.1

// Rates returns offered and admitted requests per second, in Bin-wide bins.
func Rates(r *Report) (offered, admitted plotter.XYs) {
	var end float64
	for _, o := range r.Outcomes {
		end = max(end, o.T)
		if o.AdmittedAt != nil {
			end = max(end, *o.AdmittedAt)
		}
	}
	n := int(end/Bin) + 1
	off, adm := make([]float64, n), make([]float64, n)
	for _, o := range r.Outcomes {
		off[int(o.T/Bin)]++
		if o.AdmittedAt != nil {
			adm[int(*o.AdmittedAt/Bin)]++
		}
	}
	offered, admitted = make(plotter.XYs, n), make(plotter.XYs, n)
	for i := range n {
		offered[i] = plotter.XY{X: float64(i) * Bin, Y: off[i] / Bin}
		admitted[i] = plotter.XY{X: float64(i) * Bin, Y: adm[i] / Bin}
	}
	return offered, admitted
}

// Plot draws runs to path (.png or .svg): requests per second offered and
// admitted (one admitted line per run), and tokens remaining over time per
// limit (for each limit, its busiest key; first run only when comparing).
// The file is written whole or not at all.
func Plot(path string, runs []Named) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("plot %q: the file must end in .png or .svg", path)
	}
	if len(runs) == 0 {
		return fmt.Errorf("plot: nothing to draw")
	}
	fig, err := build(runs)
	if err != nil {
		return err
	}
	w, h := fig.size()
	var c vg.CanvasSizer
	var wt io.WriterTo
	if ext == ".png" {
		img := vgimg.New(w, h)
		c, wt = img, vgimg.PngCanvas{Canvas: img}
	} else {
		svg := vgsvg.New(w, h)
		c, wt = svg, svg
	}
	fig.draw(draw.New(c))
	tmp, err := os.CreateTemp(filepath.Dir(path), ".plot-*"+ext)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := wt.WriteTo(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// figure is what Plot draws: a grid of panels, row-major.
type figure struct {
	panels [][]*panel
}

// panel is one plot of the figure and what it shows.
type panel struct {
	p      *plot.Plot
	tokens bool            // a tokens-remaining panel (else requests per second)
	lines  []*plotter.Line // every line drawn, in order
	legend []legendItem
}

type legendItem struct {
	text  string
	thumb plot.Thumbnailer
}

// placement is where a panel's data and its legend were drawn.
type placement struct {
	data, legend vg.Rectangle
}

func (p *panel) add(l *plotter.Line, label string) {
	p.p.Add(l)
	p.lines = append(p.lines, l)
	p.legend = append(p.legend, legendItem{label, l})
	p.p.Legend.Add(label, l)
}

func build(runs []Named) (*figure, error) {
	rate := &panel{p: plot.New()}
	rate.p.Title.Text = "requests per second (100 ms bins)"
	rate.p.X.Label.Text = "time (s)"
	rate.p.Y.Label.Text = "requests/s"
	offered, _ := Rates(runs[0].Report)
	lo, err := plotter.NewLine(offered)
	if err != nil {
		return nil, err
	}
	lo.Color = color.Gray{Y: 150}
	lo.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
	peakOffered, peakAdmitted := 0.0, 0.0
	for _, p := range offered {
		peakOffered = max(peakOffered, p.Y)
	}
	for _, run := range runs {
		_, admitted := Rates(run.Report)
		for _, p := range admitted {
			peakAdmitted = max(peakAdmitted, p.Y)
		}
	}
	label := "offered"
	if top := 2 * peakAdmitted; peakAdmitted > 0 && peakOffered > top {
		label = fmt.Sprintf("offered (peak %.0f/s, clipped)", peakOffered)
	}
	rate.add(lo, label)
	if top := 2 * peakAdmitted; peakAdmitted > 0 && peakOffered > top {
		// A pulse would flatten everything else: clip the axis, say so.
		rate.p.Y.Max = top
	}
	for i, run := range runs {
		_, admitted := Rates(run.Report)
		l, err := plotter.NewLine(admitted)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.2)
		rate.add(l, "admitted: "+run.Name)
	}
	rate.p.Legend.Top = true

	tokens := &panel{p: plot.New(), tokens: true}
	tokens.p.Title.Text = "tokens remaining (" + runs[0].Name + ", busiest key of each limit)"
	tokens.p.X.Label.Text = "time (s)"
	tokens.p.Y.Label.Text = "tokens"
	for i, s := range busiest(runs[0].Report.Samples) {
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		tokens.add(l, s.name)
	}
	tokens.p.Legend.Top = true
	return &figure{panels: [][]*panel{{rate}, {tokens}}}, nil
}

func (f *figure) size() (w, h vg.Length) { return 9 * vg.Inch, 7 * vg.Inch }

// draw draws f on dc and reports where each panel's data and legend went.
func (f *figure) draw(dc draw.Canvas) [][]placement {
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12)}
	plots := make([][]*plot.Plot, len(f.panels))
	for j, row := range f.panels {
		for _, p := range row {
			plots[j] = append(plots[j], p.p)
		}
	}
	cs := plot.Align(plots, tiles, dc)
	out := make([][]placement, len(f.panels))
	for j, row := range f.panels {
		for i, p := range row {
			p.p.Draw(cs[j][i])
			data := p.p.DataCanvas(cs[j][i]).Rectangle
			// The legend sits in the top right corner of the data area.
			lw, lh := vg.Length(0), vg.Length(0)
			for _, e := range p.legend {
				r := p.p.Legend.TextStyle.Rectangle(" " + e.text)
				lw = max(lw, p.p.Legend.ThumbnailWidth+r.Max.X)
				lh += r.Max.Y
			}
			leg := vg.Rectangle{Min: vg.Point{X: data.Max.X - lw, Y: data.Max.Y - lh}, Max: data.Max}
			out[j] = append(out[j], placement{data: data, legend: leg})
		}
	}
	return out
}

type series struct {
	name string
	xy   plotter.XYs
}

func busiest(samples []Sample) []series {
	count := map[[2]string]int{}
	for _, s := range samples {
		count[[2]string{s.Limit, s.Key}]++
	}
	best := map[string]string{}
	for k, n := range count {
		if cur, ok := best[k[0]]; !ok || n > count[[2]string{k[0], cur}] || (n == count[[2]string{k[0], cur}] && k[1] < cur) {
			best[k[0]] = k[1]
		}
	}
	var out []series
	for limit, key := range best {
		s := series{name: limit + " [" + key + "]"}
		for _, sm := range samples {
			if sm.Limit == limit && sm.Key == key {
				s.xy = append(s.xy, plotter.XY{X: sm.T, Y: float64(sm.Tokens)})
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
