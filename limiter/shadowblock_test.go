// Tests of WithShadow and the penalty box: a shadow refusal blocks no key,
// a policy limit's or an override's.

package limiter_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memstore"
)

const shadowBlockSrc = `
limits:
  - name: login
    key: "u:{user}"
    capacity: 1
    refill_per_second: 1
    block_for: 10m
  - name: api
    key: "t:{tenant}"
    capacity: 1
    refill_per_second: 1
`

// Under WithShadow a limit with block_for refuses nothing and blocks
// nothing: after a would-be refusal and a refill, the same key checked by
// an enforcing limiter over the same store is admitted (a block set by the
// shadow refusal would refuse it for 10 minutes). The same for an
// override's block_for.
func TestShadowAllSetsNoBlock(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	st := memstore.New(memstore.WithClock(c))
	p, err := policy.Parse([]byte(shadowBlockSrc))
	if err != nil {
		t.Fatal(err)
	}
	set := overrides.NewSet(p)
	if err := set.Put(&overrides.Override{Name: "api", Match: map[string]string{"tenant": "acme"},
		Params: overrides.Params{Capacity: 1, BlockFor: 10 * time.Minute}}); err != nil {
		t.Fatal(err)
	}
	shadow, err := limiter.New(p, st, limiter.WithShadow(), limiter.WithOverrides(set))
	if err != nil {
		t.Fatal(err)
	}
	enforced, err := limiter.New(p, st, limiter.WithOverrides(set))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []map[string]string{{"user": "bob"}, {"tenant": "acme"}} {
		for i := range 2 {
			res := check(t, shadow, limiter.Request{Descriptors: d, Cost: 1})
			if !res.Allowed || res.Limits[0].ShadowRefused != (i == 1) {
				t.Fatalf("%v: request %d: shadow mode: a would-be refusal only at the second: %+v", d, i, res)
			}
		}
		c.Advance(2 * time.Second)
		res := check(t, enforced, limiter.Request{Descriptors: d, Cost: 1})
		if !res.Allowed {
			t.Fatalf("%v: rule: a shadow refusal blocks no key (refilled after 2 s): %+v", d, res)
		}
		// The enforcing limiter's own refusal blocks the key, as it should.
		if res = check(t, enforced, limiter.Request{Descriptors: d, Cost: 1}); res.Allowed || res.Limits[0].RetryAfter < 9*time.Minute {
			t.Fatalf("%v: an enforced refusal starts the block: %+v", d, res)
		}
	}
}

// A limit's status shows its block_for, and "blocked" on a refusal it made
// (its key is then in the penalty box); under WithShadow it has none.
func TestStatusBlockFor(t *testing.T) {
	c := sluice.NewManualClock(epoch)
	st := memstore.New(memstore.WithClock(c))
	l := limiterOver(t, shadowBlockSrc, st)
	d := map[string]string{"user": "eve"}
	res := check(t, l, limiter.Request{Descriptors: d, Cost: 1})
	if s := res.Limits[0]; s.BlockFor != 10*time.Minute || s.Blocked() {
		t.Fatalf("admitted: block_for shown, not blocked: %+v", s)
	}
	js, _ := json.Marshal(res.Limits[0])
	if !strings.Contains(string(js), `"block_for":"10m0s"`) || strings.Contains(string(js), `"blocked"`) {
		t.Fatalf("admitted status JSON: %s", js)
	}
	res = check(t, l, limiter.Request{Descriptors: d, Cost: 1})
	js, _ = json.Marshal(res.Limits[0])
	if !res.Limits[0].Blocked() || !strings.Contains(string(js), `"block_for":"10m0s"`) || !strings.Contains(string(js), `"blocked":true`) {
		t.Fatalf("a refusal blocks the key: %s", js)
	}
	if s := check(t, limiterOver(t, shadowBlockSrc, st, limiter.WithShadow()), limiter.Request{Descriptors: map[string]string{"user": "x"}}).Limits[0]; s.BlockFor != 0 {
		t.Fatalf("shadow mode blocks nothing: %+v", s)
	}
}
