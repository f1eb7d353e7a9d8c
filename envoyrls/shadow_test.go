// Tests of shadow_mode under the limiter's shadow rule (limiter.DecideShadow).

package envoyrls_test

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

// A shadow_mode descriptor is decided by the policy mode's rule: hits
// above its limit are reported OK and counted as a would-be refusal (not
// refused), and in a call that another descriptor refuses it is peeked,
// taking nothing, with its RateLimit fields as if enforced.
func TestShadowModeFollowsTheLimiterRule(t *testing.T) {
	cfg, err := envoyrls.LoadDir("testdata/config")
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	svc := envoyrls.NewService(cfg, memstore.New(memstore.WithClock(clock)))
	reg := prometheus.NewRegistry()
	if err := svc.Register(reg); err != nil {
		t.Fatal(err)
	}
	call := func(hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rls.RateLimitResponse {
		t.Helper()
		r, err := svc.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	canary := desc("client", "canary") // canary_shadow: 1 per second
	if r := call(2, canary); r.OverallCode != ok || r.Statuses[0].Code != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits above a shadow limit: refused or taken: %v", r)
	}
	if got := counterOf(t, reg, "canary_shadow", "shadow_rejected"); got != 1 {
		t.Fatalf("hits above a shadow limit count as shadow_rejected: %v", got)
	}
	// A refused call (login_exact: 1 per second, asked for 2) peeks the
	// shadow descriptor: its token is still there afterwards.
	if r := call(2, desc("path", "/login"), canary); r.OverallCode != over || r.Statuses[1].Code != ok {
		t.Fatalf("refused call: %v", r)
	}
	if r := call(1, canary); r.Statuses[0].Code != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a refused call took from the shadow limit: %v", r)
	}
	if got := counterOf(t, reg, "canary_shadow", "admitted"); got != 1 {
		t.Fatalf("admitted: %v", got)
	}
	if got := counterOf(t, reg, "canary_shadow", "shadow_rejected"); got != 2 {
		t.Fatalf("shadow_rejected: %v", got)
	}
}
