// Plots of a simulation: offered and admitted rates over time, one panel per run (Plot).

package sim

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
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

// Bin is the width of Rates' bins, in seconds: rates are counts per bin
// divided by Bin, so a burst shows as a spike and not as a flat second.
// (Plot chooses its bins from the trace's span: see MaxPlotBins.)
const Bin = 0.1

// binNS is Bin in nanoseconds: bins are computed on whole nanoseconds, so
// a time on a boundary (0.3 s) falls in the bin it starts, which 0.3/0.1 =
// 2.9999999999999996 in floating point would not.
const binNS = 100_000_000

// Rates returns offered and admitted requests per second, in Bin-wide bins:
// bin i counts the times t with i*Bin <= t < (i+1)*Bin exactly (times taken
// as whole nanoseconds).
func Rates(r *Report) (offered, admitted plotter.XYs) {
	return rates(r, binNS, time.Second, time.Second)
}

// Plot draws runs to path (.png or .svg), one row of two panels per run:
// requests offered and admitted over time, and tokens remaining over time
// for the busiest key of each limit, as a percentage of that limit's
// capacity (so limits of very different capacities share one scale). The
// bins, the time axis' unit and the rates' unit are chosen from the span
// (scaleFor): 100 ms bins and requests per second up to a minute, then the
// narrowest of 200 ms, 500 ms, 1 s, 2 s, ... 10 min, ... 1 day that makes
// at most MaxPlotBins bins (a 72 h trace: 10 min bins, requests per
// minute, time in hours), so every panel draws at most MaxPlotBins + 1
// points per rate line and 2 per bin (plus its last) per tokens line,
// whatever the trace's length; a tokens line with more samples than that
// is drawn as each bin's lowest and highest (envelope). Every panel's axes
// start at 0 and carry at least five labelled, evenly spaced round ticks;
// every panel covers the same time range (the union of the runs' spans)
// and the rate panels share one y range, so runs compare by eye; legends
// sit below their panels, never over data. The file is written whole or
// not at all.
func Plot(path string, runs []Named) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("plot %q: the file must end in .png or .svg", path)
	}
	if len(runs) == 0 {
		return fmt.Errorf("plot: nothing to draw")
	}
	for _, r := range runs {
		if r.Report == nil {
			return fmt.Errorf("plot: run %q has no report", r.Name)
		}
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

// figure is what Plot draws: a grid of panels, row-major, one row per run,
// on one scale.
type figure struct {
	panels [][]*panel
	scale  scale
}

// panel is one plot of the figure and what it shows.
type panel struct {
	p      *plot.Plot
	tokens bool            // a tokens-remaining panel (else requests per second)
	lines  []*plotter.Line // every line drawn, in order
	legend []legendItem    // one per line, drawn below the panel
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
}

func newPanel(title, ylabel string, sc scale, xmax float64) *panel {
	p := &panel{p: plot.New()}
	p.p.Title.Text = title
	p.p.X.Label.Text = "time (" + sc.timeName + ")"
	p.p.Y.Label.Text = ylabel
	p.p.X.Tick.Marker, p.p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	p.p.X.Min, p.p.X.Max = 0, xmax
	p.p.Y.Min = 0
	return p
}

var (
	offeredColor  = color.Gray{Y: 150}
	admittedColor = color.RGBA{R: 31, G: 119, B: 180, A: 255}
)

// build makes the panels of runs (at least one).
func build(runs []Named) (*figure, error) {
	end := Bin
	for _, run := range runs {
		end = max(end, spanEnd(run.Report))
	}
	sc := scaleFor(end)
	xmax := sc.x(end)
	type rateLines struct{ offered, admitted plotter.XYs }
	lines := make([]rateLines, len(runs))
	peakOffered, peakAdmitted := 0.0, 0.0
	for k, run := range runs {
		offered, admitted := rates(run.Report, int64(sc.width), sc.rateUnit, sc.timeUnit)
		lines[k] = rateLines{offered, admitted}
		for i := range offered {
			peakOffered = max(peakOffered, offered[i].Y)
			peakAdmitted = max(peakAdmitted, admitted[i].Y)
		}
	}
	top, clipped := max(peakOffered, peakAdmitted), false
	if peakAdmitted > 0 && peakOffered > 2*peakAdmitted {
		// A pulse would flatten everything else: clip the axis, say so.
		top, clipped = 2*peakAdmitted, true
	}
	if top <= 0 {
		top = 1
	}
	step := niceStep(0, top)
	top = math.Ceil(top/step-1e-9) * step

	fig := &figure{scale: sc}
	for k, run := range runs {
		prefix := ""
		if len(runs) > 1 {
			prefix = run.Name + ": "
		}
		rate := newPanel(fmt.Sprintf("%srequests per %s (%s bins)", prefix, sc.rateName, sc.widthText()), "requests/"+sc.rateUnitShort(), sc, xmax)
		offered, admitted := lines[k].offered, lines[k].admitted
		lo, err := plotter.NewLine(offered)
		if err != nil {
			return nil, err
		}
		lo.Color = offeredColor
		lo.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		label := "offered"
		if clipped {
			label = fmt.Sprintf("offered (peak %s/%s, clipped)", rateText(peakOffered), sc.rateUnitShort())
		}
		rate.add(lo, label)
		la, err := plotter.NewLine(admitted)
		if err != nil {
			return nil, err
		}
		la.Color = admittedColor
		la.Width = vg.Points(1.2)
		sum := run.Report.Summary
		rate.add(la, fmt.Sprintf("admitted (%d of %d)", sum.Admitted, sum.Offered))
		rate.p.X.Min, rate.p.X.Max = 0, xmax // Add widened the axes to the lines' range
		rate.p.Y.Min, rate.p.Y.Max = 0, top  // shared by every run; the offered pulse may be clipped

		tokens := newPanel(prefix+"tokens remaining, % of capacity (busiest key of each limit)", "% of capacity", sc, xmax)
		tokens.tokens = true
		capacity := capacities(run.Report)
		for i, s := range busiest(run.Report.Samples) {
			c := capacity[s.limit]
			if c <= 0 {
				return nil, fmt.Errorf("plot: limit %q has no capacity to scale its tokens by", s.limit)
			}
			xy := make(plotter.XYs, len(s.xy))
			for k, p := range s.xy {
				xy[k] = plotter.XY{X: sc.x(p.X), Y: 100 * p.Y / float64(c)}
			}
			l, err := plotter.NewLine(envelope(xy, sc))
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.2)
			tokens.add(l, fmt.Sprintf("%s [%s]: capacity %d, refused %d", s.limit, s.key, c, sum.RejectedPerLimit[s.limit]))
		}
		tokens.p.X.Min, tokens.p.X.Max = 0, xmax
		tokens.p.Y.Min, tokens.p.Y.Max = 0, max(100, tokens.p.Y.Max)
		fig.panels = append(fig.panels, []*panel{rate, tokens})
	}
	return fig, nil
}

// spanEnd is the last instant at which r saw anything happen.
func spanEnd(r *Report) float64 {
	var end float64
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

// capacities maps each limit r decided on to its capacity.
func capacities(r *Report) map[string]int64 {
	c := map[string]int64{}
	for _, o := range r.Outcomes {
		for _, l := range o.Limits {
			c[l.Name] = l.Capacity
		}
	}
	return c
}

// The figure's geometry: its width, the height of one row of panels
// (without its legend), and the legends' text and line height.
const (
	figWidth   = 13 * vg.Inch
	rowHeight  = 3 * vg.Inch
	legendLine = 14 // points
)

var legendStyle = text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 10), XAlign: draw.XLeft, YAlign: draw.YCenter, Handler: plot.DefaultTextHandler}

func (f *figure) plots() [][]*plot.Plot {
	plots := make([][]*plot.Plot, len(f.panels))
	for j, row := range f.panels {
		for _, p := range row {
			plots[j] = append(plots[j], p.p)
		}
	}
	return plots
}

// tiles leaves legendH below every row for its legends.
func (f *figure) tiles(legendH vg.Length) draw.Tiles {
	return draw.Tiles{
		Rows: len(f.panels), Cols: len(f.panels[0]),
		PadX: vg.Points(30), PadY: legendH + vg.Points(20),
		PadTop: vg.Points(6), PadBottom: legendH + vg.Points(8),
		PadLeft: vg.Points(6), PadRight: vg.Points(14),
	}
}

// legendWidths are the widths legends wrap at on a picture w wide: those
// of their panels' data areas, which do not depend on the rows' heights
// (so any height will do); legendH is the height of the tallest legend.
func (f *figure) legendWidths(w vg.Length) (widths [][]vg.Length, legendH vg.Length) {
	h := vg.Length(len(f.panels)) * rowHeight
	cs := plot.Align(f.plots(), f.tiles(0), draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: w, Y: h}}})
	widths = make([][]vg.Length, len(f.panels))
	for j, row := range f.panels {
		for i, p := range row {
			d := p.p.DataCanvas(cs[j][i])
			widths[j] = append(widths[j], d.Max.X-d.Min.X)
			_, lines, _ := layoutLegend(p.legend, widths[j][i])
			legendH = max(legendH, vg.Length(lines)*vg.Points(legendLine))
		}
	}
	return widths, legendH
}

// size is the size of the picture: figWidth wide, each row rowHeight high
// plus room for the legends.
func (f *figure) size() (w, h vg.Length) {
	_, lh := f.legendWidths(figWidth)
	t := f.tiles(lh)
	rows := vg.Length(len(f.panels))
	return figWidth, t.PadTop + t.PadBottom + rows*rowHeight + (rows-1)*t.PadY
}

// legend layout: an entry is a thumbnail, a gap and its text; entries run
// left to right, wrapping at the width.
const (
	thumbWidth = 20 // points
	thumbGap   = 4
	entryGap   = 16
)

// layoutLegend places items in lines no wider than width (an item wider
// than that has a line of its own): it returns each item's line and x
// offset, the number of lines, and the widest line's width.
func layoutLegend(items []legendItem, width vg.Length) (at []vg.Point, lines int, widest vg.Length) {
	var x vg.Length
	for _, it := range items {
		w := vg.Points(thumbWidth+thumbGap) + legendStyle.Width(it.text)
		if lines == 0 || (x > 0 && x+vg.Points(entryGap)+w > width) {
			lines++
			x = 0
		} else if x > 0 {
			x += vg.Points(entryGap)
		}
		at = append(at, vg.Point{X: x, Y: vg.Length(lines - 1)})
		x += w
		widest = max(widest, x)
	}
	return at, lines, widest
}

// draw draws f on dc and reports where each panel's data and legend went.
func (f *figure) draw(dc draw.Canvas) [][]placement {
	widths, lh := f.legendWidths(dc.Max.X - dc.Min.X)
	cs := plot.Align(f.plots(), f.tiles(lh), dc)
	out := make([][]placement, len(f.panels))
	for j, row := range f.panels {
		for i, p := range row {
			p.p.Draw(cs[j][i])
			data := p.p.DataCanvas(cs[j][i]).Rectangle
			at, lines, widest := layoutLegend(p.legend, widths[j][i]) // as room was left for it
			top := cs[j][i].Min.Y - vg.Points(4)
			line := vg.Points(legendLine)
			for k, it := range p.legend {
				x := data.Min.X + at[k].X
				mid := top - (vg.Length(at[k].Y)+0.5)*line
				thumb := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
					Min: vg.Point{X: x, Y: mid - line/2},
					Max: vg.Point{X: x + vg.Points(thumbWidth), Y: mid + line/2},
				}}
				it.thumb.Thumbnail(&thumb)
				dc.FillText(legendStyle, vg.Point{X: x + vg.Points(thumbWidth+thumbGap), Y: mid}, it.text)
			}
			leg := vg.Rectangle{
				Min: vg.Point{X: data.Min.X, Y: top - vg.Length(lines)*line},
				Max: vg.Point{X: data.Min.X + widest, Y: top},
			}
			out[j] = append(out[j], placement{data: data, legend: leg})
		}
	}
	return out
}

// niceTicks labels at least minTicks values in an axis's range, evenly
// spaced by the widest of 1, 2 or 5 times a power of ten that gives that
// many, with unlabelled minor ticks between.
type niceTicks struct{}

const minTicks = 5

// niceStep is the spacing niceTicks labels [lo, hi] at (1 for an empty
// or non-finite range).
func niceStep(lo, hi float64) float64 {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return 1
	}
	e := int(math.Ceil(math.Log10(span)))
	for p := e; p >= e-3; p-- {
		for _, m := range []float64{5, 2, 1} {
			if s := m * math.Pow10(p); tickCount(lo, hi, s) >= minTicks {
				return s
			}
		}
	}
	return math.Pow10(e - 3) // unreachable: 10^(e-1)/5 already gives five
}

func tickCount(lo, hi, step float64) int {
	return int(math.Floor(hi/step+1e-9)-math.Ceil(lo/step-1e-9)) + 1
}

// Ticks implements plot.Ticker; an empty or non-finite range has none.
func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return nil
	}
	step := niceStep(lo, hi)
	mag := int(math.Floor(math.Log10(step) + 1e-9))
	prec := max(0, -mag)
	minor := step / 5
	if m := math.Round(step / math.Pow10(mag)); m == 2 {
		minor = step / 4
	}
	var ticks []plot.Tick
	first, last := math.Ceil(lo/step-1e-9), math.Floor(hi/step+1e-9)
	for k := first; k <= last; k++ {
		v := k * step
		if v == 0 {
			v = 0 // not -0, which would be labelled "-0"
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
	}
	for k := math.Ceil(lo/minor - 1e-9); k <= math.Floor(hi/minor+1e-9); k++ {
		v := k * minor
		if q := v / step; math.Abs(q-math.Round(q)) > 1e-6 {
			ticks = append(ticks, plot.Tick{Value: v})
		}
	}
	return ticks
}

type series struct {
	limit, key string
	xy         plotter.XYs
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
		s := series{limit: limit, key: key}
		for _, sm := range samples {
			if sm.Limit == limit && sm.Key == key {
				s.xy = append(s.xy, plotter.XY{X: sm.T, Y: float64(sm.Tokens)})
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].limit < out[j].limit })
	return out
}
