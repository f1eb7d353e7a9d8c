// Tests of Request.RefuseUnmatched: a check no limit applies to.
package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memstore"
)

func TestRefuseUnmatched(t *testing.T) {
	var src strings.Builder
	src.WriteString("limits:\n  - {name: per_tenant, key: \"tenant:{tenant}\", capacity: 1, refill_per_second: 1}\n")
	for i := range 9 {
		fmt.Fprintf(&src, "  - {name: l%d, key: \"r:{route}\", when: {route: /x%d}, capacity: 1, refill_per_second: 1}\n", i, i)
	}
	l := limiterOver(t, src.String(), memstore.New())
	ctx := context.Background()
	_, err := l.Check(ctx, limiter.Request{Descriptors: map[string]string{"tennant": "a"}, RefuseUnmatched: true})
	var ne *limiter.NoLimitError
	if !errors.Is(err, limiter.ErrNoLimitApplies) || !errors.As(err, &ne) {
		t.Fatalf("want a *NoLimitError: %v", err)
	}
	if ne.Hint != " (did you mean tenant?)" || len(ne.Needs) != 8 || ne.More != 2 || ne.Needs[0] != `limit "per_tenant" (key "tenant:{tenant}") needs tenant` ||
		ne.Needs[1] != `limit "l0" (key "r:{route}") needs route=/x0` || !strings.HasSuffix(err.Error(), "; and 2 more limits (a policy with allow_unmatched: true admits such requests unlimited)") {
		t.Fatalf("%+v\n%v", ne, err)
	}
	// Without RefuseUnmatched (forward-auth, the Envoy mode, Go callers):
	// admitted with no limits.
	if r := check(t, l, limiter.Request{Descriptors: map[string]string{"tennant": "a"}}); !r.Allowed || len(r.Limits) != 0 {
		t.Fatalf("%+v", r)
	}
	// A check a limit applies to is decided as before, and took nothing
	// from the refused one.
	if r := check(t, l, limiter.Request{Descriptors: map[string]string{"tenant": "a"}, RefuseUnmatched: true}); !r.Allowed || len(r.Limits) != 1 {
		t.Fatalf("%+v", r)
	}
	// allow_unmatched: true admits.
	l = limiterOver(t, src.String()+"allow_unmatched: true\n", memstore.New())
	if r := check(t, l, limiter.Request{Descriptors: map[string]string{}, RefuseUnmatched: true}); !r.Allowed || len(r.Limits) != 0 {
		t.Fatalf("allow_unmatched: %+v", r)
	}
}
