// Tests of a limit's envoy_settle field.

package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestEnvoySettle(t *testing.T) {
	p, err := Parse([]byte(`limits:
  - name: tpm
    key: "user:{user}"
    capacity: 5000
    refill: "5000/m"
    envoy_settle: {by: request_id, estimate: 1000}
  - name: daily
    key: "user:{user}"
    algorithm: quota
    limit: 100000
    period: day
    envoy_settle: {by: request_id, estimate: 1000}
  - name: rpm
    key: "user:{user}"
    capacity: 60
    refill: "60/m"
`))
	if err != nil {
		t.Fatal(err)
	}
	if es := p.Limits[0].EnvoySettle; es == nil || *es != (EnvoySettle{By: "request_id", Estimate: 1000}) {
		t.Errorf("tpm: %+v", es)
	}
	if p.Limits[2].EnvoySettle != nil {
		t.Errorf("rpm: %+v", p.Limits[2].EnvoySettle)
	}
	if got := p.SettleBy(); !slices.Equal(got, []string{"request_id"}) {
		t.Errorf("SettleBy: %q", got)
	}
	base := "limits:\n  - name: x\n    key: \"user:{user}\"\n    capacity: 100\n    refill_per_second: 10\n"
	for _, tc := range []struct{ field, want string }{
		{`envoy_settle: {estimate: 10}`, "needs by"},
		{`envoy_settle: {by: request_id}`, "needs estimate"},
		{`envoy_settle: {by: request_id, estimate: 0}`, "at least 1"},
		{`envoy_settle: {by: request_id, estimate: 1.5}`, "whole number"},
		{`envoy_settle: {by: request_id, estimate: 101}`, "above the limit's capacity 100"},
		{`envoy_settle: {by: user, estimate: 10}`, "never part of a key"},
		{`envoy_settle: {by: "a b", estimate: 10}`, "must be a descriptor key"},
		{`envoy_settle: {by: request_id, estimate: 10, per: 2}`, "unknown field envoy_settle.per"},
		{`envoy_settle: 5`, "must be a mapping"},
		{"when: {route: chat}\n    envoy_settle: {by: route, estimate: 10}", "never part of a key"},
	} {
		_, err := Parse([]byte(base + "    " + tc.field + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.field, err, tc.want)
		}
	}
	_, err = Parse([]byte("limits:\n  - name: x\n    key: k\n    max_in_flight: 5\n    lease_ttl: 30s\n    envoy_settle: {by: request_id, estimate: 1}\n"))
	if err == nil || !strings.Contains(err.Error(), "max_in_flight") {
		t.Errorf("max_in_flight: %v", err)
	}
}
