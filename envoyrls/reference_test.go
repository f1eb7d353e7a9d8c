// The reference service's fields (replaces, quota_mode, share_threshold, value_to_metric, detailed_metric) and metric names.

package envoyrls_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

const refConfig = `domain: d
descriptors:
  - key: user
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: api/*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: files
    value: files/*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: ip
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tier
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: base}]}
  - key: base
    rate_limit: {unit: minute, requests_per_unit: 1, name: base}
`

// refService serves refConfig on a frozen clock, counted in a registry.
func refService(t *testing.T) (*envoyrls.Service, *prometheus.Registry) {
	t.Helper()
	domain, root, err := envoyrls.Parse([]byte(refConfig))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
	svc := envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{domain: root}}, memstore.New(memstore.WithClock(clock)))
	reg := prometheus.NewRegistry()
	if err := svc.RegisterReference(reg); err != nil {
		t.Fatal(err)
	}
	return svc, reg
}

func refAsk(t *testing.T, svc *envoyrls.Service, ds ...*ratelimitv3.RateLimitDescriptor) *rls.RateLimitResponse {
	t.Helper()
	r, err := svc.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "d", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hits is ratelimit_service_rate_limit_total_hits of the labels: {domain,
// key1} when key2 is "", else {domain, key1, key2}, as the reference's
// mapping labels a key of two parts and one of more.
func hits(t *testing.T, reg *prometheus.Registry, domain, key1, key2 string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_rate_limit_total_hits" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if _, has := l["key2"]; l["domain"] == domain && l["key1"] == key1 && l["key2"] == key2 && has == (key2 != "") {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// The stats keys: the configuration's by default, request values only
// where value_to_metric or detailed_metric ask (share_threshold's entries
// by their wildcard).
func TestReferenceStatsKeys(t *testing.T) {
	svc, reg := refService(t)
	refAsk(t, svc, desc("user", "alice"))
	refAsk(t, svc, desc("path", "api/v1"))
	refAsk(t, svc, desc("files", "files/a.pdf"))
	refAsk(t, svc, desc("ip", "10.0.0.1"))
	refAsk(t, svc, desc("plain", "x"))
	refAsk(t, svc, withLimit(desc("any", "v"), 3, typev3.RateLimitUnit_MINUTE))
	if got := hits(t, reg, "d", "any_v", ""); got != 1 {
		t.Errorf("a descriptor's own limit: %v", got)
	}
	for _, c := range []struct {
		key1 string
		want float64
	}{{"user_alice", 1}, {"path_api/v1", 1}, {"files_files/*", 1}, {"plain", 1}, {"user", 0}} {
		if got := hits(t, reg, "d", c.key1, ""); got != c.want {
			t.Errorf("key1 %q: %v, want %v", c.key1, got, c.want)
		}
	}
	// (an IP's dots split the key as the reference's mapping splits it)
	if got := hits(t, reg, "d", "ip_10", "0"); got != 1 {
		t.Errorf("ip key2: %v", got)
	}
}

// Request values in the keys are bounded: beyond MaxDetailedKeys a
// descriptor is counted under the configuration's key.
func TestReferenceStatsKeysBounded(t *testing.T) {
	svc, reg := refService(t)
	for i := range envoyrls.MaxDetailedKeys + 5 {
		refAsk(t, svc, desc("user", fmt.Sprint("u", i)))
	}
	if got := hits(t, reg, "d", "user", ""); got != 5 {
		t.Fatalf("beyond the bound: %v under the configuration's key, want 5", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ratelimit_service_rate_limit_total_hits" && len(mf.GetMetric()) != envoyrls.MaxDetailedKeys+1 {
			t.Fatalf("%d series", len(mf.GetMetric()))
		}
	}
}

// share_threshold: every value a wildcard matches shares its bucket;
// replaces: a matched limit drops the one it names, which takes nothing.
func TestReferenceShareAndReplaces(t *testing.T) {
	svc, _ := refService(t)
	refAsk(t, svc, desc("files", "files/a"))
	if r := refAsk(t, svc, desc("files", "files/b")); r.Statuses[0].GetLimitRemaining() != 0 || r.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("shared bucket: %v", r)
	}
	if r := refAsk(t, svc, desc("files", "files/c")); r.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("shared bucket spent: %v", r)
	}
	for range 3 {
		r := refAsk(t, svc, desc("tier", "gold"), desc("base", "k"))
		if r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[1].GetCurrentLimit() != nil {
			t.Fatalf("replaced: %v", r)
		}
	}
	if r := refAsk(t, svc, desc("base", "k")); r.OverallCode != rls.RateLimitResponse_OK || r.Statuses[0].GetLimitRemaining() != 0 {
		t.Fatalf("the replaced limit took nothing: %v", r)
	}
}

// The new fields' mistakes, each at its line.
func TestReferenceFieldErrors(t *testing.T) {
	for src, want := range map[string]string{
		"domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n":         "line 4, column 5: share_threshold can only be used with a wildcard value",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n":    `line 3, column 5: rate_limit "a" replaces itself`,
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n":          "a replaces entry needs a non-empty name",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: a}\n":                       "replaces must be a list",
		"domain: d\ndescriptors:\n  - key: k\n    quota_mode: sure\n":                                                                    `quota_mode "sure" is not true or false`,
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, quota_mode: true}\n":                  `unknown field "quota_mode" in rate_limit`,
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: a, because: b}]}\n": `unknown field "because" in a replaces entry`,
	} {
		_, _, err := envoyrls.Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}
