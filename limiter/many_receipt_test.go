// Tests of CheckMany's receipt: what an admitted call took, settled once.

package limiter_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
)

func TestCheckManyReceipt(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	l := limiterOver(t, llmSrc, memstore.New(memstore.WithClock(c)))
	ctx := context.Background()
	a := map[string]string{"api_key": "a"}
	res, err := l.CheckMany(ctx, []limiter.Request{{Descriptors: a, Costs: map[string]int64{"tpm": 500, "rpm": 1}, Receipt: true},
		{Descriptors: a, Costs: map[string]int64{"tpm": 300, "rpm": 0}}})
	if err != nil || !res.Allowed {
		t.Fatalf("%+v %v", res, err)
	}
	// tpm once (the two requests' 800 summed), rpm once; the in-flight
	// cap is not in it.
	if got := res.Receipt.Limits(); !slices.Equal(got, []string{"rpm", "tpm"}) {
		t.Fatalf("receipt limits %q", got)
	}
	if n, _ := res.Receipt.Cost("tpm"); n != 800 {
		t.Fatalf("tpm took %d", n)
	}
	// Encoded, decoded and settled to 100 tokens: 700 back.
	b, err := res.Receipt.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.UnmarshalReceipt(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SettleCosts(ctx, r, limiter.KeepCost, map[string]int64{"tpm": 100}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, l, "a"); got["tpm"] != 9900 || got["rpm"] != 59 {
		t.Fatalf("after settle: %v", got)
	}
	if err := l.SettleCosts(ctx, r, limiter.KeepCost, map[string]int64{"tpm": 0}); !errors.Is(err, limiter.ErrSettled) {
		t.Fatalf("second settle: %v", err)
	}
	// A refused call, and a call that asks for none, have no receipt.
	res, err = l.CheckMany(ctx, []limiter.Request{{Descriptors: a, Costs: map[string]int64{"tpm": 10000}, Receipt: true}})
	if err != nil || res.Allowed || !res.Receipt.Empty() {
		t.Fatalf("refused: %+v %v", res, err)
	}
	res, err = l.CheckMany(ctx, []limiter.Request{{Descriptors: a, Costs: map[string]int64{"tpm": 10}}})
	if err != nil || !res.Allowed || !res.Receipt.Empty() {
		t.Fatalf("no receipt asked: %+v %v", res, err)
	}
}
