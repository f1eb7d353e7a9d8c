// The error of a check that no limit applies to (Request.RefuseUnmatched;
// the policy's allow_unmatched).
package limiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/suggest"
	"github.com/sluicehq/sluice/policy"
)

// ErrNoLimitApplies is matched by a *NoLimitError.
var ErrNoLimitApplies = errors.New("no limit applies")

// NoLimitError reports a check with Request.RefuseUnmatched that no limit
// of the policy applies to, while the policy does not say
// allow_unmatched: true. Nothing was taken.
type NoLimitError struct {
	// Descriptors are the request's descriptor names, sorted.
	Descriptors []string
	// Needs says, for the policy's first limits (at most 8, in policy
	// order), what the request lacks: `"tenant_api" (key "tenant:{tenant}")
	// needs tenant`, `"export" needs route=/export`.
	Needs []string
	// More counts the limits left out of Needs.
	More int
	// Hint is a descriptor name the request misspelt, as
	// " (did you mean tenant?)", or empty.
	Hint string
}

// Error reads `no limit applies to the descriptors tennant (did you mean
// tenant?): limit "tenant_api" (key "tenant:{tenant}") needs tenant; ...`.
func (e *NoLimitError) Error() string {
	var b strings.Builder
	b.WriteString(ErrNoLimitApplies.Error())
	if len(e.Descriptors) == 0 {
		b.WriteString(" to a request with no descriptors")
	} else {
		fmt.Fprintf(&b, " to the descriptors %s", strings.Join(e.Descriptors, ", "))
	}
	b.WriteString(e.Hint)
	if len(e.Needs) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(e.Needs, "; "))
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "; and %d more limits", e.More)
	}
	b.WriteString(" (a policy with allow_unmatched: true admits such requests unlimited)")
	return b.String()
}

// Unwrap returns ErrNoLimitApplies.
func (e *NoLimitError) Unwrap() error { return ErrNoLimitApplies }

// noLimitApplies is the error of a check with descriptors desc that no
// limit of p applies to.
func noLimitApplies(p *policy.Policy, desc map[string]string) *NoLimitError {
	const shown = 8
	e := &NoLimitError{Descriptors: make([]string, 0, len(desc))}
	for k := range desc {
		e.Descriptors = append(e.Descriptors, k)
	}
	slices.Sort(e.Descriptors)
	var used []string // the descriptor names the limits read
	for _, l := range p.Limits {
		var lacks []string
		for _, name := range l.Placeholders() {
			_, fixed := l.When[name] // (said below, with its value)
			if _, ok := desc[name]; !ok && !fixed && !slices.Contains(lacks, name) {
				lacks = append(lacks, name)
			}
			used = append(used, name)
		}
		whens := make([]string, 0, len(l.When))
		for k := range l.When {
			whens = append(whens, k)
		}
		slices.Sort(whens)
		for _, k := range whens {
			if got, ok := desc[k]; !ok || got != l.When[k] {
				lacks = append(lacks, k+"="+l.When[k])
			}
			used = append(used, k)
		}
		if len(e.Needs) == shown {
			e.More++
			continue
		}
		e.Needs = append(e.Needs, fmt.Sprintf("limit %q (key %q) needs %s", l.Name, l.Key, strings.Join(lacks, ", ")))
	}
	// A name no limit reads that is near one a limit does: the likely typo.
	for _, d := range e.Descriptors {
		if slices.Contains(used, d) {
			continue
		}
		if h := suggest.DidYouMean(d, used); h != "" {
			e.Hint = h
			break
		}
	}
	return e
}
