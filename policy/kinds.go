// The kinds of limit as the validator knows them: one table, a parse function per kind.

package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/suggest"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/window"
)

// kindDef is what the validator knows of one kind of limit: the fields the
// kind takes besides commonFields, the first holding its capacity, and the
// function that validates them into the limit (reporting every problem
// through f). Everything else about a kind is store's kind table.
type kindDef struct {
	fields []string
	parse  func(f *limitFields, l *Limit)
}

// kindDefs is indexed by Kind (a row for each of store.Kinds()); a Kind's
// name is its String.
// The kinds that are store.Kind.Blockable take block_for (blockable).
var kindDefs = [...]kindDef{
	TokenBucket:   {[]string{"capacity", "refill_per_second", "refill", blockField}, blockable(parseTokenBucket)},
	SlidingWindow: {[]string{"limit", "window", blockField}, blockable(parseWindow)},
	FixedWindow:   {[]string{"limit", "window", blockField}, blockable(parseWindow)},
	Concurrency:   {[]string{"max_in_flight", "lease_ttl"}, parseConcurrency},
	Quota:         {[]string{"limit", "period", "timezone", blockField}, blockable(parseQuota)},
}

// blockField is the penalty box's field: a duration, once a key is
// refused, during which it stays refused (store.Limit.BlockFor).
const blockField = "block_for"

// blockable is parse followed by block_for, when given: a positive
// duration of at most store.MaxBlockFor.
func blockable(parse func(f *limitFields, l *Limit)) func(f *limitFields, l *Limit) {
	return func(f *limitFields, l *Limit) {
		parse(f, l)
		if !f.has(blockField) {
			return
		}
		d, ok := f.duration(blockField)
		switch {
		case !ok:
		case d <= 0:
			f.bad(blockField, "%s %v must be positive (omit it for no penalty box)", blockField, d)
		case d > store.MaxBlockFor:
			f.bad(blockField, "%s %v is longer than the most, 100 days (2400h): deny the key instead (an override with deny: true)", blockField, d)
		default:
			l.BlockFor = d
		}
	}
}

// commonFields are the fields every kind of limit takes.
var commonFields = []string{"name", "key", "when", "algorithm", "hash_tag", "on_store_error", "shadow", "new_key_gate", "unit", "adaptive", "alerts", "envoy_settle", "fair_share"}

// ParseKind returns the Kind whose String is s (store.ParseKind).
func ParseKind(s string) (Kind, error) { return store.ParseKind(s) }

// capacityField is the field that holds a limit of kind k's capacity
// ("capacity", "limit", "max_in_flight").
func capacityField(k Kind) string { return kindDefs[k].fields[0] }

// kindNames are the Kinds' names, in the order they are listed.
func kindNames() []string {
	var names []string
	for _, k := range store.Kinds() {
		names = append(names, k.String())
	}
	return names
}

// kind returns the limit's kind: concurrency when it has max_in_flight,
// else its algorithm (token_bucket by default). known is false when the
// kind cannot be told (reported).
func (f *limitFields) kind() (k Kind, known bool) {
	algo, hasAlgo := f.str("algorithm")
	if f.has("max_in_flight") {
		if hasAlgo && algo != Concurrency.String() {
			f.bad("algorithm", "a max_in_flight limit takes no algorithm (it is a concurrency limit)")
		}
		return Concurrency, true
	}
	if !f.has("algorithm") {
		return TokenBucket, true
	}
	if !hasAlgo {
		return TokenBucket, false
	}
	k, err := ParseKind(algo)
	if err != nil {
		if hint := suggest.DidYouMean(algo, kindNames()); hint != "" {
			f.bad("algorithm", "unknown algorithm %q%s", algo, hint)
		} else {
			f.bad("algorithm", "%v", err)
		}
		return TokenBucket, false
	}
	return k, true
}

// unknownFields reports each field that neither commonFields nor the kind
// takes; when the kind is not known, only fields no kind takes.
func (f *limitFields) unknownFields(k Kind, known bool) {
	for _, key := range f.keys {
		field := key.Value
		if slices.Contains(commonFields, field) {
			continue
		}
		if known && slices.Contains(kindDefs[k].fields, field) {
			continue
		}
		if !known && slices.ContainsFunc(kindDefs[:], func(d kindDef) bool { return slices.Contains(d.fields, field) }) {
			continue
		}
		msg := "unknown field" + suggest.DidYouMean(field, commonFields, allKindFields())
		if known {
			msg = fmt.Sprintf("unknown field for a %s limit", k) + kindFieldHint(field, k)
		}
		f.v.at(key, f.name, field, msg)
	}
}

// kindFieldHint is what to tell of a field unknown to kind k: which kinds
// take it, else the nearest field k takes.
func kindFieldHint(field string, k Kind) string {
	var owners []string
	for _, o := range store.Kinds() {
		if slices.Contains(kindDefs[o].fields, field) {
			owners = append(owners, o.String())
		}
	}
	if len(owners) > 0 {
		list := owners[0]
		if n := len(owners); n > 1 {
			list = strings.Join(owners[:n-1], ", ") + " and " + owners[n-1]
		}
		return fmt.Sprintf(" (it is a field of %s limits)", list)
	}
	return suggest.DidYouMean(field, commonFields, kindDefs[k].fields)
}

// allKindFields is every field some kind takes.
func allKindFields() []string {
	var all []string
	for _, d := range kindDefs {
		for _, f := range d.fields {
			if !slices.Contains(all, f) {
				all = append(all, f)
			}
		}
	}
	return all
}

func parseTokenBucket(f *limitFields, l *Limit) {
	c, okC := f.atLeastOne("capacity")
	rate, rateField, okR := f.rate()
	if !okC || !okR {
		return
	}
	l.Bucket = bucket.Limit{Capacity: c, Rate: rate}
	if err := l.Bucket.Validate(); err != nil {
		// The remaining problems are ranges and the time to refill, which
		// bucket words from the capacity when it is to blame.
		field := rateField
		if strings.Contains(err.Error(), "capacity") {
			field = "capacity"
		}
		f.bad(field, "%s", strings.TrimPrefix(err.Error(), "sluice: "))
	}
}

// rate returns the refill rate in tokens per second and the field it came
// from (refill_per_second or refill); false when it is missing, given both
// ways, or invalid (reported: each given field is checked on its own).
func (f *limitFields) rate() (float64, string, bool) {
	var rate float64
	var field string
	ok := true
	if s, given := f.str("refill_per_second"); given {
		field = "refill_per_second"
		r, err := strconv.ParseFloat(s, 64)
		switch {
		case err != nil:
			f.bad(field, "%q is not a number", s)
			ok = false
		case math.IsNaN(r) || math.IsInf(r, 0):
			f.bad(field, "rate %v must be finite", r)
			ok = false
		case r <= 0:
			f.bad(field, "rate %v must be positive", r)
			ok = false
		}
		rate = r
	}
	if s, given := f.str("refill"); given {
		field = "refill"
		r, err := ParseRate(s)
		if err != nil {
			f.bad(field, "%v", err)
			ok = false
		}
		rate = r
	}
	switch hasRate, hasRefill := f.has("refill_per_second"), f.has("refill"); {
	case hasRate && hasRefill:
		f.bad("refill", "give refill_per_second or refill, not both")
		return 0, "", false
	case !hasRate && !hasRefill:
		f.bad("refill_per_second", "missing refill_per_second (or refill)")
		return 0, "", false
	}
	return rate, field, ok && field != ""
}

// parseWindow validates a sliding or fixed window: limit per window.
func parseWindow(f *limitFields, l *Limit) {
	n, okN := f.atLeastOne("limit")
	w, okW := f.positive("window", "missing window")
	if okN && okW {
		l.Window = window.Limit{Limit: n, Window: w}
	}
}

// parseConcurrency validates a concurrency limit: max_in_flight held at
// once, each slot expiring after lease_ttl.
func parseConcurrency(f *limitFields, l *Limit) {
	m, okM := f.atLeastOne("max_in_flight")
	ttl, okT := f.positive("lease_ttl", "missing lease_ttl (how long an unreleased slot is held)")
	if okM && okT {
		l.MaxInFlight, l.SlotTTL = m, ttl
	}
}

// parseQuota validates a calendar quota: limit per period (day, week,
// month, year) in timezone (an IANA name; UTC when omitted).
func parseQuota(f *limitFields, l *Limit) {
	n, okN := f.atLeastOne("limit")
	var q quota.Limit
	okP := false
	if s, ok := f.str("period"); !ok && !f.has("period") {
		f.bad("period", "missing period (day, week, month or year)")
	} else if ok {
		periods := []string{"day", "week", "month", "year"}
		if p, err := quota.ParsePeriod(s); err == nil {
			q.Period, okP = p, true
		} else {
			f.bad("period", "unknown period %q (want day, week, month or year)%s", s, suggest.DidYouMean(s, periods))
		}
	}
	okZ := true
	q.Location = time.UTC
	if s, ok := f.str("timezone"); ok {
		loc, err := loadZone(s)
		if errors.Is(err, errMachineZone) {
			f.bad("timezone", "time zone %q depends on the machine that runs sluice: name the zone (an IANA name such as Europe/Berlin, or UTC)", s)
			okZ = false
		} else if err != nil {
			f.bad("timezone", "unknown time zone %q (want an IANA name such as Europe/Berlin, or UTC)", s)
			okZ = false
		} else {
			q.Location = loc
		}
	} else if f.has("timezone") {
		okZ = false
	}
	if okN && okP && okZ {
		q.Limit = n
		l.Quota = q
	}
}

// errMachineZone is loadZone's error for "" and "Local".
var errMachineZone = errors.New("the zone depends on the machine")

// loadZone is time.LoadLocation, refusing "Local" and "" (a policy's
// meaning must not depend on the machine it runs on).
func loadZone(s string) (*time.Location, error) {
	if s == "" || s == "Local" {
		return nil, errMachineZone
	}
	return time.LoadLocation(s)
}
