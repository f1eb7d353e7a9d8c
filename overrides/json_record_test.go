// The benchmark of a record's decoding (Override.UnmarshalJSON, what a
// Store's Full read costs per record); json_fast_test.go tests it.

package overrides_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

// benchRecord is a record as a Store holds it.
func benchRecord(tb testing.TB) []byte {
	o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "tenant-0001234"},
		Params: overrides.Params{Capacity: 500, RefillPerSecond: 50}, TTL: 86400, Note: "trial"}
	o.Stamp(time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC), time.Time{})
	b, err := json.Marshal(o)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkDecodeRecord: go test -run '^$' -bench DecodeRecord -benchmem ./overrides/
func BenchmarkDecodeRecord(b *testing.B) {
	rec := benchRecord(b)
	b.Run("UnmarshalJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var o overrides.Override
			if err := o.UnmarshalJSON(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var o overrides.Override
			if err := json.Unmarshal(rec, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
