// PROMETHEUS_MAPPER_YAML: which mappings sluice stands in for.

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Envoy Gateway's mapping (its envoy-ratelimit statsd exporter ConfigMap),
// the reference's default mapping in substance.
const egMapping = `# Requires statsd exporter >= v0.6.0 since it uses the "drop" action.
mappings:
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    name: "ratelimit_service_rate_limit_near_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit.service.call.should_rate_limit.*"
    name: "ratelimit_service_should_rate_limit_error"
    match_metric_type: counter
    labels:
      err_type: "$1"
`

// A mapping sluice would not apply.
const foreignMapping = `mappings:
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "my_team_over_limit"
`

func TestCheckMapperYAML(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, wantErr string
	}{
		{"absent (Envoy Gateway's optional ConfigMap not there)", filepath.Join(dir, "none.yaml"), ""},
		{"Envoy Gateway's mapping", write("eg.yaml", egMapping), ""},
		{"empty", write("empty.yaml", ""), ""},
		{"a series sluice does not export", write("foreign.yaml", foreignMapping), "my_team_over_limit"},
		{"another program's stats", write("other.yaml", "mappings:\n  - match: \"envoy.cluster.*.upstream_rq\"\n    name: \"upstream\"\n"), "envoy.cluster"},
		{"not YAML", write("bad.yaml", "mappings: [\n"), "not a statsd exporter mapping"},
		{"a directory", dir, "PROMETHEUS_MAPPER_YAML"},
	} {
		err := checkMapperYAML(tc.path)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "PROMETHEUS_MAPPER_YAML") {
			t.Errorf("%s: error %v, want one naming PROMETHEUS_MAPPER_YAML and %q", tc.name, err, tc.wantErr)
		}
	}
}
