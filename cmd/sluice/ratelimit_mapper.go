// PROMETHEUS_MAPPER_YAML: a statsd exporter mapping sluice can stand in for.

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkMapperYAML reports whether the statsd exporter mapping at path
// (envoyproxy/ratelimit's PROMETHEUS_MAPPER_YAML) asks only for what sluice
// exports anyway: no file (Envoy Gateway names one whether or not its
// optional ConfigMap exists), or mappings that each match one of the
// reference's ratelimit.service.* stats and name a ratelimit_service_*
// series — the reference's own mapping and Envoy Gateway's, which sluice's
// series follow. Any other mapping, or a file that is not a mapping, is
// an error naming the variable: sluice would not honour it.
func checkMapperYAML(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("PROMETHEUS_MAPPER_YAML=%q: %v", path, err)
	}
	var m struct {
		Mappings []struct {
			Match string `yaml:"match"`
			Name  string `yaml:"name"`
		} `yaml:"mappings"`
	}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("PROMETHEUS_MAPPER_YAML=%q: not a statsd exporter mapping: %v", path, err)
	}
	for _, mp := range m.Mappings {
		if !strings.HasPrefix(mp.Match, "ratelimit.service.") || mp.Name != "" && !strings.HasPrefix(mp.Name, "ratelimit_service_") {
			return fmt.Errorf("PROMETHEUS_MAPPER_YAML=%q: mapping %q -> %q: sluice exports the reference's ratelimit_service_* series as its own mapping names them, and applies no other mapping", path, mp.Match, mp.Name)
		}
	}
	return nil
}
