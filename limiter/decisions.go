// sluice_decisions_total: its series without the priority label while
// the limiter's policies have had no classes, with it from the first
// policy that has some (at New or at a reload), every earlier count kept.

package limiter

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/policy"
)

const decisionsHelp = "Admission decisions per limit, by result (admitted/rejected) and attempt (original/retry)."

// decisionVec is sluice_decisions_total. A limiter whose policies have
// no classes counts in plain ({limit, result, attempt}, the series as
// before classes); from the first policy with classes (New or SetPolicy)
// it counts in labelled ({limit, result, attempt, priority}, "" for a
// request with none) and never goes back, and Collect reports plain's
// counts (the decisions before, and any of checks still deciding under
// the previous policy) in labelled's priority "" series: each series of
// the labelled form is the sum of what its limit, result and attempt
// counted, so sum without (priority) continues the plain series.
//
// A registry fixes a metric name's label names for the life of the
// program (prometheus.Registry), so a decisionVec made without classes,
// whose labels may change, is an unchecked collector (it describes
// nothing); one made with classes describes the labelled form.
type decisionVec struct {
	plain    *prometheus.CounterVec
	labelled atomic.Pointer[prometheus.CounterVec] // nil: no policy has had classes
	desc     *prometheus.Desc                      // labelled's
	checked  bool                                  // made labelled (New's policy has classes)
}

func newDecisionVec(p *policy.Policy) *decisionVec {
	d := &decisionVec{
		plain: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decisions_total", Help: decisionsHelp},
			[]string{"limit", "result", "attempt"}),
		desc: prometheus.NewDesc("sluice_decisions_total", decisionsHelp, []string{"limit", "result", "attempt", "priority"}, nil),
	}
	if len(p.Priorities) > 0 {
		d.label()
		d.checked = true
	}
	return d
}

// classed reports whether decisions are counted by class.
func (d *decisionVec) classed() bool { return d.labelled.Load() != nil }

// label makes the labelled form (the caller serialises it: New,
// SetPolicy under the limiter's lock).
func (d *decisionVec) label() {
	if d.labelled.Load() == nil {
		d.labelled.Store(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decisions_total", Help: decisionsHelp},
			[]string{"limit", "result", "attempt", "priority"}))
	}
}

// counter is the series of a limit, result, attempt and class (class
// ignored while decisions are not counted by class).
func (d *decisionVec) counter(limit, result, attempt, class string) prometheus.Counter {
	if lv := d.labelled.Load(); lv != nil {
		return lv.WithLabelValues(limit, result, attempt, class)
	}
	return d.plain.WithLabelValues(limit, result, attempt)
}

// Describe sends the labelled form's descriptor when the vec was made
// labelled, else nothing (unchecked: its labels may change).
func (d *decisionVec) Describe(ch chan<- *prometheus.Desc) {
	if d.checked {
		ch <- d.desc
	}
}

// Collect sends plain's series, or labelled's with plain's counts added
// to its priority "" series (made for a limit, result and attempt that
// labelled has not counted).
func (d *decisionVec) Collect(ch chan<- prometheus.Metric) {
	lv := d.labelled.Load()
	if lv == nil {
		d.plain.Collect(ch)
		return
	}
	before := map[[3]string]float64{}
	for _, m := range collected(d.plain) {
		l, v := read(m)
		before[[3]string{l["limit"], l["result"], l["attempt"]}] = v
	}
	if len(before) == 0 {
		lv.Collect(ch)
		return
	}
	for _, m := range collected(lv) {
		l, v := read(m)
		k := [3]string{l["limit"], l["result"], l["attempt"]}
		if b, ok := before[k]; ok && l["priority"] == "" {
			delete(before, k)
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, v+b, k[0], k[1], k[2], "")
			continue
		}
		ch <- m
	}
	for k, b := range before {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, b, k[0], k[1], k[2], "")
	}
}

// collected returns c's metrics.
func collected(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	return ms
}

// read returns a counter's labels and value.
func read(m prometheus.Metric) (map[string]string, float64) {
	var pb dto.Metric
	_ = m.Write(&pb) // (a counter of a CounterVec always writes)
	l := make(map[string]string, len(pb.Label))
	for _, p := range pb.Label {
		l[p.GetName()] = p.GetValue()
	}
	return l, pb.GetCounter().GetValue()
}

// relabel moves decisions to the labelled form when p is the first
// policy with classes.
func (d *decisionVec) relabel(p *policy.Policy) {
	if len(p.Priorities) > 0 {
		d.label()
	}
}
