// Tests of the per-message log budget.
package ratelog_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/ratelog"
)

// A message logged 100 times at once writes the burst (20); the rest are
// counted, and the next record written after the budget refills carries
// them as "suppressed". Another message has its own budget.
func TestBudgetPerMessageWithSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	m := ratelog.New(log, slog.LevelError, "store failed")
	other := ratelog.New(log, slog.LevelError, "other")
	for range 100 {
		m.Log(slog.String("error", "boom"))
	}
	other.Log()
	if n := strings.Count(buf.String(), `"msg":"store failed"`); n != ratelog.Burst {
		t.Fatalf("%d records of 100 at once, want the burst %d", n, ratelog.Burst)
	}
	if !strings.Contains(buf.String(), `"msg":"other"`) {
		t.Fatal("another message shares the budget")
	}
	if got := m.Suppressed(); got != 100-ratelog.Burst {
		t.Fatalf("suppressed %d, want %d", got, 100-ratelog.Burst)
	}
	time.Sleep(time.Second / ratelog.Rate * 2) // (room for one record at least)
	buf.Reset()
	m.Log(slog.String("error", "boom"))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if rec["suppressed"] != float64(100-ratelog.Burst) || rec["level"] != "ERROR" || rec["error"] != "boom" {
		t.Fatalf("the next record: %v", rec)
	}
	if m.Suppressed() != 0 {
		t.Fatal("the count is not reset once reported")
	}
}
