package quota_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/quota"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// The periods' bounds, in UTC and across Europe/Berlin's daylight-saving
// changes (2026-03-29: a 23-hour day; 2026-10-25: a 25-hour day).
func TestBounds(t *testing.T) {
	t.Parallel()
	berlin := zone(t, "Europe/Berlin")
	for _, c := range []struct {
		p          quota.Period
		loc        *time.Location
		t          string
		start, end string
		length     time.Duration
	}{
		{quota.Day, nil, "2026-03-29T12:00:00Z", "2026-03-29T00:00:00Z", "2026-03-30T00:00:00Z", 24 * time.Hour},
		{quota.Day, berlin, "2026-03-29T12:00:00+02:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23 * time.Hour},
		{quota.Day, berlin, "2026-10-25T12:00:00+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
		// the hour that happens twice, each time
		{quota.Day, berlin, "2026-10-25T02:30:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
		{quota.Day, berlin, "2026-10-25T02:30:00+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
		// midnight is in the next day, the instant before it in this one
		{quota.Day, berlin, "2026-03-30T00:00:00+02:00", "2026-03-30T00:00:00+02:00", "2026-03-31T00:00:00+02:00", 24 * time.Hour},
		{quota.Day, berlin, "2026-03-29T23:59:59.999999999+02:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23 * time.Hour},
		// weeks start on Monday
		{quota.Week, nil, "2026-12-06T23:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z", 7 * 24 * time.Hour},
		{quota.Week, berlin, "2026-03-29T10:00:00+02:00", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 7*24*time.Hour - time.Hour},
		// a month boundary, and months across a change
		{quota.Month, nil, "2026-02-28T23:59:59Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24 * time.Hour},
		{quota.Month, berlin, "2026-03-31T23:30:00+02:00", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*24*time.Hour - time.Hour},
		{quota.Month, berlin, "2026-04-01T00:00:00+02:00", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00", 30 * 24 * time.Hour},
		{quota.Month, berlin, "2026-03-31T22:30:00Z", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00", 30 * 24 * time.Hour},
		{quota.Year, nil, "2028-12-31T23:59:59Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z", 366 * 24 * time.Hour},
		{quota.Year, berlin, "2026-12-31T23:30:00Z", "2027-01-01T00:00:00+01:00", "2028-01-01T00:00:00+01:00", 365 * 24 * time.Hour},
	} {
		l := quota.Limit{Limit: 1, Period: c.p, Location: c.loc}
		s, e := l.Bounds(at(t, c.t).UnixNano())
		if s != at(t, c.start).UnixNano() || e != at(t, c.end).UnixNano() || time.Duration(e-s) != c.length {
			t.Errorf("%v at %s: [%v, %v) (%v), want [%s, %s) (%v)", l, c.t, time.Unix(0, s).In(l.Location), time.Unix(0, e).In(l.Location),
				time.Duration(e-s), c.start, c.end, c.length)
		}
	}
}

// A zone whose midnight is skipped by its daylight-saving change still
// gives periods holding every instant, back to back.
func TestBoundsCoverEveryInstant(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"America/Sao_Paulo", "America/Havana", "Asia/Beirut", "Europe/Berlin", "Australia/Lord_Howe"} {
		l := quota.Limit{Limit: 1, Period: quota.Day, Location: zone(t, name)}
		t0 := time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		s, e := l.Bounds(t0)
		for range 3 * 366 {
			if !(s <= t0 && t0 < e) {
				t.Fatalf("%s: %d not in [%d, %d)", name, t0, s, e)
			}
			if d := time.Duration(e - s); d < 22*time.Hour || d > 26*time.Hour {
				t.Fatalf("%s: a day of %v at %v", name, d, time.Unix(0, s).In(l.Location))
			}
			if s2, _ := l.Bounds(e - 1); s2 != s {
				t.Fatalf("%s: the day's last instant is in another period", name)
			}
			t0 = e
			s2, e2 := l.Bounds(e)
			if s2 != e {
				t.Fatalf("%s: the next day starts at %v, not at the end %v", name, time.Unix(0, s2), time.Unix(0, e))
			}
			s, e = s2, e2
		}
	}
}

// Refused exactly until the next period's start, in a zone with DST: the
// RetryAfter ends at the boundary, a nanosecond before it is still refused.
func TestRefusedUntilTheBoundary(t *testing.T) {
	t.Parallel()
	l := quota.Limit{Limit: 10, Period: quota.Day, Location: zone(t, "Europe/Berlin")}
	now := at(t, "2026-03-29T20:00:00+02:00").UnixNano()
	st, dec := l.Step(quota.New, now, 10)
	if !dec.Allowed || dec.Remaining != 0 || dec.ResetAfter != 4*time.Hour {
		t.Fatalf("first: %+v", dec)
	}
	st, dec = l.Step(st, now, 1)
	if dec.Allowed || dec.RetryAfter != 4*time.Hour || dec.Remaining != 0 {
		t.Fatalf("over: %+v", dec)
	}
	if _, d := l.Step(st, now+int64(dec.RetryAfter)-1, 1); d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("a ns before the boundary: %+v", d)
	}
	st2, d := l.Step(st, now+int64(dec.RetryAfter), 1)
	if !d.Allowed || d.Remaining != 9 || d.ResetAfter != 24*time.Hour {
		t.Fatalf("at the boundary: %+v", d)
	}
	// settle: a refund within the period counts, one for the last period
	// does nothing; a charge goes beyond the limit.
	if _, ok := l.Adjust(st, now+int64(dec.RetryAfter), -5); ok {
		t.Fatal("a refund to a past period was applied")
	}
	st3, ok := l.Adjust(st2, now+int64(dec.RetryAfter), -1)
	if !ok || st3.Used != 0 {
		t.Fatalf("refund: %+v %v", st3, ok)
	}
	st4, _ := l.Adjust(st3, now+int64(dec.RetryAfter), 25)
	if _, d := l.Step(st4, now+int64(dec.RetryAfter), 0); d.Remaining != 0 || st4.Used != 25 {
		t.Fatalf("charge: %+v %+v", st4, d)
	}
}

func TestValidateAndParse(t *testing.T) {
	t.Parallel()
	for _, l := range []quota.Limit{{Limit: 0, Period: quota.Day}, {Limit: 1}, {Limit: 1, Period: 9}} {
		if err := l.Validate(); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v", l, err)
		}
	}
	for _, s := range []string{"day", "week", "month", "year"} {
		p, err := quota.ParsePeriod(s)
		if err != nil || p.String() != s {
			t.Errorf("%q: %v %v", s, p, err)
		}
	}
	if _, err := quota.ParsePeriod("fortnight"); err == nil {
		t.Error("fortnight parsed")
	}
	if err := (quota.Limit{Limit: 3, Period: quota.Day}).CheckCost(4); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Error(err)
	}
}
