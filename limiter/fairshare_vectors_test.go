package limiter_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// The worked vectors of docs/behaviour.md section 8 (fair shares): each
// row of Vector F1's table, replayed in order on a manual clock against
// the policy the section gives, gives the row's result, remaining and
// retry.
func TestFairShareVectors(t *testing.T) {
	doc, err := os.ReadFile("../docs/behaviour.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "**Vector F1")
	if !ok {
		t.Fatal("docs/behaviour.md has no Vector F1")
	}
	c := sluice.NewManualClock(storetest.Epoch)
	src := "limits:\n  - name: provider_tpm\n    key: \"provider:{provider}\"\n    capacity: 10\n    refill_per_second: 10\n    fair_share: {by: tenant, weights: {acme: 3}, active_window: 10s}\n"
	l := limiterOver(t, src, memstore.New(memstore.WithClock(c)))
	seconds := func(s string) time.Duration {
		f, err := strconv.ParseFloat(strings.TrimSuffix(s, " s"), 64)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return time.Duration(f * float64(time.Second))
	}
	at := time.Duration(0)
	rows := 0
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| t ") {
			if rows > 0 && !strings.HasPrefix(line, "|") {
				break
			}
			continue
		}
		f := strings.Split(strings.Trim(line, "| "), " | ")
		if len(f) != 6 {
			t.Fatalf("row %q: %d fields, want 6", line, len(f))
		}
		rows++
		if d := seconds(f[0]); d > at {
			c.Advance(d - at)
			at = d
		}
		desc := map[string]string{"provider": "openai"}
		if f[1] != "—" {
			desc["tenant"] = f[1]
		}
		cost, _ := strconv.ParseInt(f[2], 10, 64)
		res, err := l.Check(context.Background(), limiter.Request{Descriptors: desc, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		st := res.Limits[0]
		rem, _ := strconv.ParseInt(f[4], 10, 64)
		if res.Allowed != (f[3] == "admitted") || st.TokensRemaining != rem || res.RetryAfter != seconds(f[5]) {
			t.Errorf("row %d %q: allowed %v remaining %d retry %v", rows, line, res.Allowed, st.TokensRemaining, res.RetryAfter)
		}
		if f[3] == "refused" && st.ShareRefused() != (st.TokensRemaining >= cost) {
			t.Errorf("row %d: ShareRefused %v", rows, st.ShareRefused())
		}
	}
	if rows != 12 {
		t.Fatalf("%d rows, want 12", rows)
	}
}
