// Tests of the top-level allow_unmatched field.
package policy_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

func TestAllowUnmatched(t *testing.T) {
	t.Parallel()
	const lim = "limits:\n  - {name: a, key: \"t:{tenant}\", capacity: 1, refill: 1/s}\n"
	for src, want := range map[string]bool{lim: false, lim + "allow_unmatched: true\n": true,
		lim + "allow_unmatched: True\n": true, lim + "allow_unmatched: false\n": false} {
		p, err := policy.Parse([]byte(src))
		if err != nil || p.AllowUnmatched != want {
			t.Errorf("%q: %v, AllowUnmatched %v, want %v", src, err, p != nil && p.AllowUnmatched, want)
		}
	}
	for _, v := range []string{"yes", "1", "[true]", "\"true\"", "null"} {
		_, err := policy.Parse([]byte(lim + "allow_unmatched: " + v + "\n"))
		if err == nil || !strings.Contains(err.Error(), `line 3, column 18: field "allow_unmatched": `) || !strings.Contains(err.Error(), "is not true or false") {
			t.Errorf("allow_unmatched: %s: %v", v, err)
		}
	}
	if _, err := policy.Parse([]byte(lim + "allow_unmatch: true\n")); err == nil || !strings.Contains(err.Error(), "did you mean allow_unmatched?") {
		t.Errorf("misspelt: %v", err)
	}
}
