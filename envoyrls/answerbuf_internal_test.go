// Tests of answerbuf.go's parts against what they stand for: fields against
// answer.Fields, setDuration against durationpb.New.

package envoyrls

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/answer"
)

func TestFieldsIsAnswerFields(t *testing.T) {
	names := []string{"", "per_second", `a"b\c`, "é\x00\x7f", strings.Repeat("n", 200), strings.Repeat(`"`, 400)}
	ints := []int64{math.MinInt64, -1, 0, 1, 59, 1 << 40, math.MaxInt64}
	durs := []time.Duration{math.MinInt64, -time.Second, 0, 1, time.Second - 1, time.Second, 90 * time.Minute, math.MaxInt64}
	r := rand.New(rand.NewPCG(27, 1))
	n := 0
	for _, name := range names {
		for range 300 {
			l := answer.Limit{Name: name, Capacity: ints[r.IntN(len(ints))] + r.Int64N(3),
				Window: durs[r.IntN(len(durs))], Remaining: ints[r.IntN(len(ints))],
				Allowed: r.IntN(2) == 0, ResetAfter: durs[r.IntN(len(durs))], RetryAfter: durs[r.IntN(len(durs))]}
			wp, wr := answer.Fields(l)
			gp, gr := fields(l)
			if gp != wp || gr != wr {
				t.Fatalf("fields(%+v) = %q, %q; answer.Fields: %q, %q", l, gp, gr, wp, wr)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("nothing compared")
	}
}

func TestSetDurationIsDurationpbNew(t *testing.T) {
	ds := []time.Duration{math.MinInt64, -1500 * time.Millisecond, -1, 0, 1, time.Second - 1, time.Second, 61*time.Second + 7, math.MaxInt64}
	r := rand.New(rand.NewPCG(27, 2))
	for range 1000 {
		ds = append(ds, time.Duration(r.Int64()-math.MaxInt64/2))
	}
	for _, d := range ds {
		var b statusBuf
		b.setDuration(d)
		if want := durationpb.New(d); !proto.Equal(b.st.DurationUntilReset, want) {
			t.Fatalf("setDuration(%v): %v, durationpb.New: %v", d, b.st.DurationUntilReset, want)
		}
	}
}
