// The fast path's keys when rendering them moves the key buffer: each item keeps its own key.

package limiter

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestFastKeysAcrossBufferGrowth checks 8 limits whose keys (300 bytes
// each) outgrow a fresh scratch's key buffer several times in one check,
// with a fresh Result each time, and requires every status to carry its
// own limit's key and every bucket to have been taken from once per
// check: an item whose key pointed into bytes a later append overwrote
// would name another key (or take from another bucket).
func TestFastKeysAcrossBufferGrowth(t *testing.T) {
	var src strings.Builder
	src.WriteString("limits:\n")
	for i := range maxFast {
		fmt.Fprintf(&src, "  - name: l%d\n    key: \"k%d:{v%d}\"\n    capacity: 100\n    refill_per_second: 0.001\n", i, i, i)
	}
	p, err := policy.Parse([]byte(src.String()))
	if err != nil {
		t.Fatal(err)
	}
	hc := &heldCounter{Store: memstore.New()}
	l, err := New(p, hc)
	if err != nil {
		t.Fatal(err)
	}
	if l.compiled.Load().fast == nil {
		t.Fatal("no fast plan")
	}
	desc := map[string]string{}
	for i := range maxFast {
		desc[fmt.Sprintf("v%d", i)] = strings.Repeat(string(rune('a'+i)), 300)
	}
	for round := range 5 {
		var res Result // a fresh scratch: its key buffer grows during the check
		if err := l.CheckInto(context.Background(), Request{Descriptors: desc}, &res); err != nil {
			t.Fatal(err)
		}
		if !res.Allowed || len(res.Limits) != maxFast {
			t.Fatalf("round %d: %+v", round, res)
		}
		for i, st := range res.Limits {
			if want := fmt.Sprintf("k%d:%s", i, desc[fmt.Sprintf("v%d", i)]); st.Name != fmt.Sprintf("l%d", i) || st.Key != want {
				t.Fatalf("round %d status %d: %s %.20q..., want l%d %.20q...", round, i, st.Name, st.Key, i, want)
			}
			if st.TokensRemaining != int64(99-round) {
				t.Fatalf("round %d status %d: remaining %d, want %d", round, i, st.TokensRemaining, 99-round)
			}
		}
	}
	if hc.held.Load() < 4 {
		t.Fatalf("the fast path decided %d of 5 checks", hc.held.Load())
	}
}
