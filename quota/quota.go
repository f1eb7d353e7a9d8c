// Package quota holds calendar quotas: at most Limit units of cost per
// calendar period (a day, a week starting Monday, a month or a year) in a
// time zone, reset exactly at the period's start in that zone. A day is
// midnight to midnight, so around a daylight-saving change it lasts 23 or
// 25 hours; a month is its own number of days.
//
// Like the windows of package window, quotas read wall time (Unix
// nanoseconds), so counters in different processes agree on the
// boundaries; a time earlier than one already seen counts as the start of
// the period the state belongs to. Arithmetic is exact integer math.
//
// Time-zone rules come from the system's tz database, else from Go's
// embedded one when the program imports time/tzdata (cmd/sluice does, so
// that a minimal container has them).
package quota

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// Period is a calendar period.
type Period uint8

// The periods. The zero Period is none (invalid).
const (
	Day   Period = iota + 1 // midnight to midnight
	Week                    // Monday 00:00 to the next Monday 00:00
	Month                   // the 1st 00:00 to the next month's 1st 00:00
	Year                    // 1 January 00:00 to the next 1 January 00:00
)

var periodNames = [...]string{Day: "day", Week: "week", Month: "month", Year: "year"}

// String returns "day", "week", "month" or "year" (ParsePeriod's input);
// "none" for the zero Period and any other value.
func (p Period) String() string {
	if p >= Day && p <= Year {
		return periodNames[p]
	}
	return "none"
}

// ParsePeriod returns the Period whose String is s; any other s is an
// error matching sluice.ErrInvalidLimit.
func ParsePeriod(s string) (Period, error) {
	for p := Day; p <= Year; p++ {
		if periodNames[p] == s {
			return p, nil
		}
	}
	return 0, sluice.Errorf(sluice.ErrInvalidLimit, "unknown period %q (want day, week, month or year)", s)
}

// Nominal is the period's usual length (a day 24h, a week 7 days, a month
// 30 days, a year 365 days), for descriptions that want one number (the
// RateLimit-Policy field's w); decisions use the calendar's exact bounds.
func (p Period) Nominal() time.Duration {
	switch p {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Limit is at most Limit units of cost per calendar Period in Location.
type Limit struct {
	// Limit is the cost admitted per period. It must be >= 1.
	Limit int64
	// Period is the calendar period. It must be one of the constants.
	Period Period
	// Location is the time zone whose calendar sets the bounds; nil means
	// UTC.
	Location *time.Location
}

// Validate returns an error matching sluice.ErrInvalidLimit when l is
// unusable.
func (l Limit) Validate() error {
	if l.Limit < 1 {
		return sluice.Errorf(sluice.ErrInvalidLimit, "quota limit %d must be at least 1", l.Limit)
	}
	if l.Period < Day || l.Period > Year {
		return sluice.Errorf(sluice.ErrInvalidLimit, "quota period %d is not day, week, month or year", l.Period)
	}
	return nil
}

// CheckCost returns nil when 0 <= cost <= l.Limit, else an error matching
// sluice.ErrInvalidCost or sluice.ErrCostExceedsCapacity.
func (l Limit) CheckCost(cost int64) error { return bucket.CheckCost(cost, l.Limit) }

// Zone is the name of l's time zone ("UTC" when Location is nil).
func (l Limit) Zone() string {
	if l.Location == nil {
		return "UTC"
	}
	return l.Location.String()
}

func (l Limit) loc() *time.Location {
	if l.Location == nil {
		return time.UTC
	}
	return l.Location
}

// Bounds returns the start and the end (Unix ns; start <= t < end) of the
// period containing t (Unix ns) in l's zone. A period starts at the first
// instant of its first date (00:00, or where a daylight-saving change
// skips midnight, the instant of the change), so periods are back to back.
// Outside the years time.Time represents in Unix ns, the bounds saturate
// at the int64 range.
func (l Limit) Bounds(t int64) (start, end int64) {
	loc := l.loc()
	first := l.first(time.Unix(0, t).In(loc).Date())
	start, end = unixNano(dayStart(first, loc)), unixNano(dayStart(l.next(first), loc))
	// A date whose 00:00 happens twice (a change back at midnight) can put
	// t beyond its date's period; step to the period that holds it.
	for i := 0; t >= end && i < 2; i++ {
		first = l.next(first)
		start, end = end, unixNano(dayStart(l.next(first), loc))
	}
	for i := 0; t < start && i < 2; i++ {
		first = l.prev(first)
		start, end = unixNano(dayStart(first, loc)), start
	}
	return start, end
}

// date is a calendar date.
type date struct {
	y int
	m time.Month
	d int
}

// norm returns the date y-m-d names (d and m may be out of range).
func norm(y int, m time.Month, d int) date {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	return date{y, m, d}
}

// first returns the first date of the period holding y-m-d.
func (l Limit) first(y int, m time.Month, d int) date {
	switch l.Period {
	case Week:
		wd := (int(time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()) + 6) % 7 // days since Monday
		return norm(y, m, d-wd)
	case Month:
		return date{y, m, 1}
	case Year:
		return date{y, 1, 1}
	}
	return date{y, m, d}
}

// next and prev return the first date of the next and the previous period.
func (l Limit) next(f date) date { return l.shift(f, 1) }
func (l Limit) prev(f date) date { return l.shift(f, -1) }

func (l Limit) shift(f date, n int) date {
	switch l.Period {
	case Week:
		return norm(f.y, f.m, f.d+7*n)
	case Month:
		return norm(f.y, f.m+time.Month(n), 1)
	case Year:
		return norm(f.y+n, 1, 1)
	}
	return norm(f.y, f.m, f.d+n)
}

// dayStart is the first instant of date f in loc: its 00:00, or, where a
// change skips midnight, the instant of the change.
func dayStart(f date, loc *time.Location) time.Time {
	t := time.Date(f.y, f.m, f.d, 0, 0, 0, 0, loc)
	if y, m, d := t.Date(); (date{y, m, d}) != f {
		// time.Date resolved the skipped 00:00 into the day before: the
		// date starts where that day's zone ends.
		_, end := t.ZoneBounds()
		if !end.IsZero() {
			t = end
		}
	}
	return t
}

// unixNano is t in Unix ns, saturating outside the int64 range.
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// State is a key's quota state: the start of the period it counts (Unix
// ns) and the cost used in it. New (Start math.MinInt64) is a key never
// seen; a state of an earlier period counts as a new period's.
type State struct {
	Start int64
	Used  int64
}

// New is the state of a key never seen.
var New = State{Start: math.MinInt64}

// at returns the period's bounds at now and the state counted in it: a
// state of an earlier period counts nothing; a time before the state's
// period (a stale reading) counts as that period's start.
func (l Limit) at(st State, now int64) (State, int64, int64) {
	start, end := l.Bounds(now)
	switch {
	case st.Start == start:
	case st.Start > start: // stale clock: decide at the state's period start
		now = st.Start
		start, end = l.Bounds(now)
		if st.Start != start { // a state of other bounds (changed zone)
			return State{Start: start}, start, end
		}
	default:
		st = State{Start: start}
	}
	return st, now, end
}

// Step decides cost (0 <= cost <= l.Limit; 0 peeks) at now (Unix ns)
// against state st: admitted when used + cost <= Limit in the period
// containing now. It returns the new state (st unchanged in meaning when
// refused) and the decision: Remaining is Limit - used (never negative),
// RetryAfter the time to the next period's start when refused, ResetAfter
// the time to it when anything is used in the period (else 0).
func (l Limit) Step(st State, now, cost int64) (State, sluice.Decision) {
	st, now, end := l.at(st, now)
	var dec sluice.Decision
	if st.Used <= l.Limit-cost {
		st.Used += cost
		dec.Allowed = true
	} else {
		dec.RetryAfter = time.Duration(end - now)
	}
	dec.Remaining = max(l.Limit-st.Used, 0)
	if st.Used > 0 {
		dec.ResetAfter = time.Duration(end - now)
	}
	return st, dec
}

// Adjust corrects a cost taken earlier at now: delta < 0 returns -delta
// within the period the state counts (a state of an earlier period has
// nothing to return: ok is false, the state unchanged); delta > 0 adds
// delta to the used cost of the current period, beyond Limit if need be
// (the quota is then refused until the period ends).
func (l Limit) Adjust(st State, now, delta int64) (State, bool) {
	cur, _, _ := l.at(st, now)
	if delta < 0 {
		if cur.Start != st.Start {
			return st, false
		}
		cur.Used = max(cur.Used+delta, 0)
		return cur, true
	}
	if cur.Used > math.MaxInt64-delta {
		cur.Used = math.MaxInt64
	} else {
		cur.Used += delta
	}
	return cur, true
}

// String describes l: "1000000 per month (Europe/Berlin)".
func (l Limit) String() string {
	return fmt.Sprintf("%d per %s (%s)", l.Limit, l.Period, l.Zone())
}
