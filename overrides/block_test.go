// An override's block_for: carried to its effective limit and spec.

package overrides_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

// An override's block_for is the effective limit's and its spec's (a
// shadow override's spec has none: a shadow refusal blocks nothing); a
// concurrency limit takes none (kind_mismatch).
func TestBlockForCarried(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	tenant := map[string]string{"tenant": "acme"}
	o := overrides.Override{Name: "tenant_api", Match: tenant, Params: overrides.Params{Capacity: 5, BlockFor: 10 * time.Minute}}
	lim, err := overrides.Effective(&o, p)
	if err != nil || lim.BlockFor != 10*time.Minute {
		t.Fatalf("effective: %+v %v", lim, err)
	}
	s := overrides.NewSet(p)
	for _, c := range []struct {
		o    overrides.Override
		want time.Duration
	}{
		{o, 10 * time.Minute},
		{overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "shadowy"}, Params: overrides.Params{BlockFor: time.Minute, Shadow: true}}, 0},
		{overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "only"}, Params: overrides.Params{BlockFor: time.Minute}}, time.Minute},
	} {
		if err := s.Put(&c.o); err != nil {
			t.Fatal(err)
		}
		if got := s.Get(c.o.Name, c.o.Match).Spec().BlockFor; got != c.want {
			t.Errorf("%+v: spec block_for %v, want %v", c.o.Params, got, c.want)
		}
	}
	bad := overrides.Override{Name: "inflight", Match: tenant, Params: overrides.Params{BlockFor: time.Minute}}
	if err := overrides.Validate(&bad, p); !errors.Is(err, overrides.ErrKindMismatch) {
		t.Fatalf("concurrency block_for: %v", err)
	}
}
