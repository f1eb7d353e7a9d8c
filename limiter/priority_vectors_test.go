package limiter_test

import (
	"context"
	"fmt"
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

// The worked vectors of docs/behaviour.md section 7 (priority classes):
// each row of its table, replayed in order on a manual clock against the
// policy the section gives (classesSrc without its default), gives the
// row's result, remaining and wait or retry.
func TestPriorityVectors(t *testing.T) {
	doc, err := os.ReadFile("../docs/behaviour.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "**Vector P1")
	if !ok {
		t.Fatal("docs/behaviour.md has no Vector P1")
	}
	c := sluice.NewManualClock(storetest.Epoch)
	src := strings.Replace(classesSrc, "default_priority: standard\n", "", 1)
	l := limiterOver(t, src, memstore.New(memstore.WithClock(c)))
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
		if len(f) != 7 {
			t.Fatalf("row %q: %d fields, want 7", line, len(f))
		}
		rows++
		ts, _ := strconv.ParseFloat(strings.TrimSuffix(f[0], " s"), 64)
		if d := time.Duration(ts * float64(time.Second)); d > at {
			c.Advance(d - at)
			at = d
		}
		cost, _ := strconv.ParseInt(f[2], 10, 64)
		var mw time.Duration
		if f[3] != "0" {
			s, _ := strconv.ParseFloat(strings.TrimSuffix(f[3], " s"), 64)
			mw = time.Duration(s * float64(time.Second))
		}
		res, err := l.Check(context.Background(), limiter.Request{Descriptors: map[string]string{}, Cost: cost,
			Priority: strings.Trim(f[1], "`"), MaxWait: mw, Reserve: mw > 0})
		if err != nil {
			t.Fatal(err)
		}
		got := "refused"
		timing := "retry " + secs(res.RetryAfter)
		if res.Allowed {
			got, timing = "admitted", "wait "+secs(res.Wait)
		}
		gotRow := fmt.Sprintf("%s | %d | %s", got, res.Limits[0].TokensRemaining, timing)
		if want := strings.Join(f[4:], " | "); gotRow != want {
			t.Errorf("row %d %q: got %s", rows, line, gotRow)
		}
	}
	if rows < 8 {
		t.Fatalf("%d rows", rows)
	}
}

// secs is d as the vectors write it: "0", "1 s", "0.5 s".
func secs(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}
