// Plot bins: the bin width and the time and rate units a plot uses, chosen from its span, and series reduced to them.
package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"
)

// MaxPlotBins bounds the rate bins of a plot's panels: Plot counts
// requests in bins of the narrowest width of binWidths (100 ms at least)
// that covers the span in at most MaxPlotBins, so a panel shows one or
// two bins per pixel and draws a bounded number of points whatever the
// trace's length (a 72 h trace: 10 min bins).
const MaxPlotBins = 600

// binWidths are the widths a plot's bins are chosen among, shortest first
// (past the last, whole multiples of it).
var binWidths = []time.Duration{
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// scale is how a plot bins and labels a span: the bins' width, the unit of
// its time axis and the unit of its rates.
type scale struct {
	width    time.Duration // of a rate bin
	timeUnit time.Duration // x values are seconds / timeUnit
	timeName string        // "s", "min", "h", "days"
	rateUnit time.Duration // rates are requests per rateUnit
	rateName string        // "second", "minute", "hour"
}

// scaleFor is the scale of a plot spanning [0, end] seconds.
func scaleFor(end float64) scale {
	if !(end > 0) {
		end = 0
	}
	end = min(end, 9e9) // (~285 years: the times sim represents)
	var s scale
	for _, w := range binWidths {
		if s.width = w; end <= w.Seconds()*MaxPlotBins {
			break
		}
	}
	if day := binWidths[len(binWidths)-1]; end > day.Seconds()*MaxPlotBins {
		s.width = time.Duration(math.Ceil(end/(day.Seconds()*MaxPlotBins))) * day
	}
	span := time.Duration(end * 1e9)
	switch {
	case span <= 5*time.Minute:
		s.timeUnit, s.timeName = time.Second, "s"
	case span <= 5*time.Hour:
		s.timeUnit, s.timeName = time.Minute, "min"
	case span <= 10*24*time.Hour:
		s.timeUnit, s.timeName = time.Hour, "h"
	default:
		s.timeUnit, s.timeName = 24*time.Hour, "days"
	}
	switch {
	case s.width < time.Minute:
		s.rateUnit, s.rateName = time.Second, "second"
	case s.width < time.Hour:
		s.rateUnit, s.rateName = time.Minute, "minute"
	default:
		s.rateUnit, s.rateName = time.Hour, "hour"
	}
	return s
}

// rateUnitShort is the rates' unit as the axis shows it: "s", "min", "h".
func (s scale) rateUnitShort() string {
	switch s.rateUnit {
	case time.Minute:
		return "min"
	case time.Hour:
		return "h"
	}
	return "s"
}

// rateText writes a rate with at most two decimals: "2400", "0.6".
func rateText(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
}

// x is time t (seconds) in the scale's time unit.
func (s scale) x(t float64) float64 { return t * 1e9 / float64(s.timeUnit) }

// widthText names the bins' width: "100 ms", "10 min", "2 h".
func (s scale) widthText() string {
	switch w := s.width; {
	case w < time.Second:
		return fmt.Sprintf("%d ms", w.Milliseconds())
	case w < time.Minute:
		return fmt.Sprintf("%d s", w/time.Second)
	case w < time.Hour:
		return fmt.Sprintf("%d min", w/time.Minute)
	case w < 24*time.Hour:
		return fmt.Sprintf("%d h", w/time.Hour)
	default:
		return fmt.Sprintf("%d days", w/(24*time.Hour))
	}
}

// binOf is the index of the bin of width w (ns) holding time t (seconds,
// >= 0; recorded times are whole nanoseconds, so a time on a boundary falls
// in the bin it starts).
func binOf(t float64, w int64) int { return int(int64(math.Round(t*1e9)) / w) }

// rates counts offered and admitted requests in bins of width w (ns), as
// requests per unit: bin i counts the times t with i*w <= t < (i+1)*w, at
// x = i*w in xUnit (ns).
func rates(r *Report, w int64, unit, xUnit time.Duration) (offered, admitted plotter.XYs) {
	end := 0
	for _, o := range r.Outcomes {
		end = max(end, binOf(o.T, w))
		if o.AdmittedAt != nil {
			end = max(end, binOf(*o.AdmittedAt, w))
		}
	}
	n := end + 1
	off, adm := make([]int, n), make([]int, n)
	for _, o := range r.Outcomes {
		off[binOf(o.T, w)]++
		if o.AdmittedAt != nil {
			adm[binOf(*o.AdmittedAt, w)]++
		}
	}
	per := float64(unit) / float64(w) // a count per bin times per is a rate per unit
	offered, admitted = make(plotter.XYs, n), make(plotter.XYs, n)
	for i := range n {
		x := float64(int64(i)*w) / float64(xUnit)
		offered[i] = plotter.XY{X: x, Y: float64(off[i]) * per}
		admitted[i] = plotter.XY{X: x, Y: float64(adm[i]) * per}
	}
	return offered, admitted
}

// envelope reduces a series in time order (x in the scale's time unit) to
// at most two points per bin of width w: the lowest and the highest of the
// bin, in the order they came (the first of them on a tie), so every
// dip and peak is drawn, and its last point. A series of at most 2 points
// per bin on average over its span is kept whole.
func envelope(xy plotter.XYs, s scale) plotter.XYs {
	if len(xy) == 0 {
		return xy
	}
	w := float64(s.width) / float64(s.timeUnit) // in x units
	bins := int(xy[len(xy)-1].X/w) + 1
	if len(xy) <= 2*bins {
		return xy
	}
	out := make(plotter.XYs, 0, 2*bins)
	for i := 0; i < len(xy); {
		b := int(xy[i].X / w)
		lo, hi := i, i
		j := i
		for ; j < len(xy) && int(xy[j].X/w) == b; j++ {
			if xy[j].Y < xy[lo].Y {
				lo = j
			}
			if xy[j].Y > xy[hi].Y {
				hi = j
			}
		}
		out = append(out, xy[min(lo, hi)])
		if lo != hi {
			out = append(out, xy[max(lo, hi)])
		}
		i = j
	}
	if last := xy[len(xy)-1]; out[len(out)-1] != last {
		out = append(out, last) // the series ends where it ends
	}
	return out
}
