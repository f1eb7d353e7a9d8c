// A limit's alerts: the fractions of its capacity whose crossing fires one
// event per key, threshold and period.

package policy

import (
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// MaxAlerts bounds a limit's alerts list.
const MaxAlerts = 16

// alerts validates a limit's alerts: a list of fractions above 0 and at
// most 1 (of the capacity used in the current period or bucket), none
// twice; kept in increasing order.
func (f *limitFields) alerts(l *Limit) {
	n := f.fields["alerts"]
	if n == nil {
		return
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 || len(n.Content) > MaxAlerts {
		f.bad("alerts", "must be a list of 1 to %d fractions of the capacity (like [0.8, 0.95, 1.0])", MaxAlerts)
		return
	}
	var out []float64
	for _, e := range n.Content {
		x, err := strconv.ParseFloat(e.Value, 64)
		switch {
		case e.Kind != yaml.ScalarNode || err != nil:
			f.v.at(e, f.name, "alerts", "each alert must be a number (a fraction of the capacity, like 0.8)")
			return
		case !(x > 0 && x <= 1):
			f.v.at(e, f.name, "alerts", "alert "+e.Value+" must be above 0 and at most 1 (a fraction of the capacity)")
			return
		case slices.Contains(out, x):
			f.v.at(e, f.name, "alerts", "alert "+e.Value+" given twice")
			return
		}
		out = append(out, x)
	}
	if f.has("max_in_flight") {
		f.bad("alerts", "a max_in_flight limit takes no alerts")
		return
	}
	slices.Sort(out)
	l.Alerts = out
}

// NearAlert is the lowest alert of l below 1 (0: none): a status whose
// use reaches it is near its limit.
func (l *Limit) NearAlert() float64 {
	for _, a := range l.Alerts {
		if a < 1 {
			return a
		}
	}
	return 0
}
