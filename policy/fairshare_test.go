package policy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// The example.
const fairSharePolicy = `
limits:
  - name: provider_tpm
    key: "provider"
    capacity: 30000
    refill_per_second: 500
    fair_share:
      by: tenant            # a descriptor
      weights: {acme: 3}    # optional; default weight 1
      active_window: 10s    # a tenant is active if it asked within this window
`

func TestFairShare(t *testing.T) {
	p, err := policy.Parse([]byte(fairSharePolicy))
	if err != nil {
		t.Fatal(err)
	}
	l := p.Limits[0]
	fs := l.FairShare
	if fs == nil || fs.By != "tenant" || fs.ActiveWindow != 10*time.Second || fs.MaxTenants != store.DefaultMaxTenants || len(fs.Weights) != 1 {
		t.Fatalf("fair_share %+v", fs)
	}
	if fs.Weight("acme") != 3 || fs.Weight("other") != 1 || fs.Weight("") != 1 {
		t.Errorf("weights %v", fs.Weights)
	}
	if l.Limit.FairShare != (store.FairShare{ActiveWindow: 10 * time.Second, MaxTenants: store.DefaultMaxTenants}) {
		t.Errorf("store part %+v", l.Limit.FairShare)
	}
	sp, err := store.NewSpec(l.StoreLimit())
	if err != nil || sp.FairShare == nil || sp.FairShare.MaxTenants != store.DefaultMaxTenants {
		t.Fatalf("spec: %v %+v", err, sp)
	}
	q, err := policy.Parse([]byte(strings.Replace(fairSharePolicy, "active_window: 10s", "active_window: 1m\n      max_tenants: 50", 1)))
	if err != nil || q.Limits[0].FairShare.MaxTenants != 50 || q.Limits[0].FairShare.ActiveWindow != time.Minute {
		t.Fatalf("max_tenants: %v %+v", err, q)
	}
	r, err := policy.Parse([]byte("limits:\n  - name: a\n    key: k\n    capacity: 1\n    refill_per_second: 1\n"))
	if err != nil || r.Limits[0].FairShare != nil || r.Limits[0].Limit.FairShare.On() {
		t.Fatalf("no fair_share: %v", err)
	}
}

// Each wrong fair_share is refused with an error naming what is wrong.
func TestFairShareErrors(t *testing.T) {
	base := "limits:\n  - name: x\n    key: \"user:{user}\"\n    when: {route: chat}\n    hash_tag: \"{user}\"\n    capacity: 100\n    refill_per_second: 10\n"
	for body, want := range map[string]string{
		"fair_share: tenant":                                             "must be a mapping",
		"fair_share: {active_window: 10s}":                               "needs by",
		"fair_share: {by: tenant}":                                       "needs active_window",
		"fair_share: {by: user, active_window: 10s}":                     "each tenant would have a bucket of its own",
		"fair_share: {by: route, active_window: 10s}":                    "descriptor of the limit's key, hash_tag or when",
		"fair_share: {by: \"a b\", active_window: 10s}":                  "must be a descriptor key",
		"fair_share: {by: t, active_window: 0s}":                         "must be positive",
		"fair_share: {by: t, active_window: soon}":                       "must be a duration",
		"fair_share: {by: t, active_window: 1s, weights: 3}":             "must be a mapping of tenant to weight",
		"fair_share: {by: t, active_window: 1s, weights: {a: 0}}":        "weights.a must be a whole number from 1 to 1000000",
		"fair_share: {by: t, active_window: 1s, weights: {a: 1.5}}":      "weights.a must be a whole number",
		"fair_share: {by: t, active_window: 1s, weights: {a: 1000001}}":  "weights.a must be a whole number",
		"fair_share: {by: t, active_window: 1s, weights: {\"\": 5}}":     "the shared \"other\" tenant",
		"fair_share: {by: t, active_window: 1s, max_tenants: 0}":         "max_tenants must be a whole number from 1",
		"fair_share: {by: t, active_window: 1s, max_tenants: 100000000}": "max_tenants must be a whole number from 1",
		"fair_share: {by: t, active_window: 1s, share: 2}":               "unknown field fair_share.share",
	} {
		_, err := policy.Parse([]byte(base + "    " + body + "\n"))
		if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	win := "limits:\n  - name: w\n    key: k\n    algorithm: sliding_window\n    limit: 5\n    window: 1m\n    fair_share: {by: t, active_window: 1s}\n"
	if _, err := policy.Parse([]byte(win)); err == nil || !strings.Contains(err.Error(), "token_bucket limits only") {
		t.Errorf("a window's fair_share: %v", err)
	}
}

// Whatever fair_share a policy writes, an accepted one is a valid store
// FairShare on a token bucket with by outside the key.
func FuzzFairShare(f *testing.F) {
	f.Add("tenant", "10s", "acme", "3", "100")
	f.Add("k", "0s", "", "0", "0")
	f.Add("t", "1ms", "a", "1000000", "16777216")
	f.Fuzz(func(t *testing.T, by, window, tenant, weight, maxT string) {
		src := fmt.Sprintf("limits:\n  - name: x\n    key: \"k:{k}\"\n    capacity: 100\n    refill_per_second: 10\n    fair_share: {by: %q, active_window: %q, weights: {%q: %q}, max_tenants: %q}\n", by, window, tenant, weight, maxT)
		p, err := policy.Parse([]byte(src))
		if err != nil {
			if !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("error %v", err)
			}
			return
		}
		l := p.Limits[0]
		fs := l.FairShare
		if fs == nil || fs.By == "k" || fs.By == "" || fs.ActiveWindow <= 0 || fs.MaxTenants < 1 || fs.MaxTenants > store.MaxShareTenants {
			t.Fatalf("accepted %+v", fs)
		}
		for _, w := range fs.Weights {
			if w < 1 || w > policy.MaxShareWeight {
				t.Fatalf("weight %d accepted", w)
			}
		}
		if _, err := store.NewSpec(l.StoreLimit()); err != nil {
			t.Fatalf("accepted fair_share does not compile: %v", err)
		}
	})
}
