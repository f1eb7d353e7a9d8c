// Tests of a limit's adaptive field.

package policy

import (
	"strings"
	"testing"
	"time"
)

func TestAdaptive(t *testing.T) {
	p, err := Parse([]byte(`limits:
  - name: llm
    key: "key:{api_key}"
    capacity: 10
    refill_per_second: 100
    adaptive: {min_refill_per_second: 5}
  - name: tool
    key: "tool:{tool}"
    capacity: 10
    refill_per_second: 50
    adaptive: {min_refill_per_second: 1, decrease: 0.8, increase_per_second: 2, cooldown: 500ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	if a := p.Limits[0].Adaptive; a == nil || *a != (Adaptive{MinRefill: 5, Decrease: 0.5, Increase: 1, Cooldown: time.Second}) {
		t.Errorf("defaults: %+v", a)
	}
	if a := p.Limits[1].Adaptive; a == nil || *a != (Adaptive{MinRefill: 1, Decrease: 0.8, Increase: 2, Cooldown: 500 * time.Millisecond}) {
		t.Errorf("given: %+v", a)
	}
	for _, tc := range []struct{ adaptive, want string }{
		{`{}`, "needs min_refill_per_second"},
		{`{min_refill_per_second: 100}`, "below refill_per_second"},
		{`{min_refill_per_second: 1, decrease: 1}`, "must be in (0, 1)"},
		{`{min_refill_per_second: 1, increase_per_second: 0}`, "must be positive"},
		{`{min_refill_per_second: 1, step: 2}`, "unknown field adaptive.step"},
		{`5`, "must be a mapping"},
	} {
		_, err := Parse([]byte("limits:\n  - name: x\n    key: k\n    capacity: 10\n    refill_per_second: 100\n    adaptive: " + tc.adaptive + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.adaptive, err, tc.want)
		}
	}
	_, err = Parse([]byte("limits:\n  - name: x\n    key: k\n    algorithm: fixed_window\n    limit: 10\n    window: 1s\n    adaptive: {min_refill_per_second: 1}\n"))
	if err == nil || !strings.Contains(err.Error(), "token_bucket") {
		t.Errorf("a window: %v", err)
	}
}
