package limiter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

const plainSrc = "limits:\n  - name: api\n    key: global\n    capacity: 100\n    refill_per_second: 1\n"

// A reload that adds priority classes to a limiter started without:
// sluice_decisions_total keeps its series without the label until then
// and has the label after (every series, the earlier counts in priority
// ""), on a pedantic registry; a reload back to no classes keeps the
// label (priority "").
func TestDecisionsRelabelOnReload(t *testing.T) {
	c := sluice.NewManualClock(storetest.Epoch)
	reg := prometheus.NewPedanticRegistry()
	l := limiterOver(t, plainSrc, memstore.New(memstore.WithClock(c)), limiter.WithRegisterer(reg))
	ctx := context.Background()
	check := func(class string, n int) {
		t.Helper()
		for range n {
			if _, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: 1, Priority: class}); err != nil {
				t.Fatal(err)
			}
		}
	}
	series := func(want string) {
		t.Helper()
		head := "# HELP sluice_decisions_total Admission decisions per limit, by result (admitted/rejected) and attempt (original/retry).\n# TYPE sluice_decisions_total counter\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(head+want), "sluice_decisions_total"); err != nil {
			t.Fatal(err)
		}
	}
	check("", 3)
	plain := func(admitted int) string {
		return `sluice_decisions_total{attempt="original",limit="api",result="admitted"} ` + itoa(admitted) + "\n" +
			`sluice_decisions_total{attempt="original",limit="api",result="rejected"} 0` + "\n" +
			`sluice_decisions_total{attempt="original",limit="api",result="shadow_rejected"} 0` + "\n" +
			`sluice_decisions_total{attempt="retry",limit="api",result="admitted"} 0` + "\n" +
			`sluice_decisions_total{attempt="retry",limit="api",result="rejected"} 0` + "\n" +
			`sluice_decisions_total{attempt="retry",limit="api",result="shadow_rejected"} 0` + "\n"
	}
	series(plain(3))
	// A reload without classes: the series as they were.
	p, _ := policy.Parse([]byte(strings.Replace(plainSrc, "capacity: 100", "capacity: 101", 1)))
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	check("", 1)
	series(plain(4))
	// A reload that adds classes: every series labelled, the 4 earlier
	// decisions in priority "".
	withClasses := "priorities:\n  - name: interactive\n  - name: batch\n    reserve: 0.5\n" + plainSrc
	p, _ = policy.Parse([]byte(withClasses))
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	check("batch", 2)
	check("", 1)
	labelled := func(none, batch int) string {
		var b strings.Builder
		for _, a := range []string{"original", "retry"} {
			for _, cls := range []string{"", "batch", "interactive"} {
				for _, r := range []string{"admitted", "rejected", "shadow_rejected"} {
					v := 0
					if a == "original" && r == "admitted" {
						v = map[string]int{"": none, "batch": batch}[cls]
					}
					b.WriteString(`sluice_decisions_total{attempt="` + a + `",limit="api",priority="` + cls + `",result="` + r + `"} ` + itoa(v) + "\n")
				}
			}
		}
		return b.String()
	}
	series(labelled(5, 2))
	// Back to no classes: the label stays (priority "").
	p, _ = policy.Parse([]byte(plainSrc))
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	check("", 1)
	series(labelled(6, 2))
	if _, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{}, Cost: 1, Priority: "batch"}); err == nil {
		t.Fatal("a class the policy no longer lists: admitted")
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
