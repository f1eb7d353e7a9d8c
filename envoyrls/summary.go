// Summaries of a loaded Envoy configuration, in the shape of its files.

package envoyrls

import (
	"sort"
	"strings"
)

// DomainSummary is one domain of a Config in the shape of Envoy's
// configuration files (the JSON names are the YAML field names), for
// reporting what is loaded.
type DomainSummary struct {
	Domain      string              `json:"domain"`
	Descriptors []DescriptorSummary `json:"descriptors"`
}

// DescriptorSummary is one node of a domain's descriptor tree: its key, its
// value ("" for a key-only node, "x*" for a prefix), its rate limit (nil
// when it has none), whether it is in shadow mode, and its children in
// file order.
type DescriptorSummary struct {
	Key         string              `json:"key"`
	Value       string              `json:"value,omitempty"`
	RateLimit   *RateLimitSummary   `json:"rate_limit,omitempty"`
	ShadowMode  bool                `json:"shadow_mode,omitempty"`
	Descriptors []DescriptorSummary `json:"descriptors,omitempty"`

	QuotaMode      bool `json:"quota_mode,omitempty"`
	DetailedMetric bool `json:"detailed_metric,omitempty"`
	ValueToMetric  bool `json:"value_to_metric,omitempty"`
	ShareThreshold bool `json:"share_threshold,omitempty"`
}

// RateLimitSummary is a node's rate_limit: an unlimited one has neither
// unit nor requests_per_unit; any other has both (requests_per_unit left
// out when 0) (unit in lower case, as in
// the files: second, minute, hour, day, week, month, year).
type RateLimitSummary struct {
	Name            string   `json:"name,omitempty"`
	Unit            string   `json:"unit,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	Replaces        []string `json:"replaces,omitempty"` // the names it replaces (the files' replaces: [{name: N}])
}

// Summary returns every domain of c, sorted by name, each with its whole
// descriptor tree in file order. It shares nothing with c.
func (c *Config) Summary() []DomainSummary {
	names := make([]string, 0, len(c.Domains))
	for d := range c.Domains {
		names = append(names, d)
	}
	sort.Strings(names)
	out := make([]DomainSummary, 0, len(names))
	for _, d := range names {
		ds := summarize(c.Domains[d].Children)
		if ds == nil {
			ds = []DescriptorSummary{}
		}
		out = append(out, DomainSummary{Domain: d, Descriptors: ds})
	}
	return out
}

func summarize(nodes []*Node) []DescriptorSummary {
	var out []DescriptorSummary
	for _, n := range nodes {
		d := DescriptorSummary{Key: n.Key, Value: n.Value, ShadowMode: n.Shadow, Descriptors: summarize(n.Children),
			QuotaMode: n.Quota, DetailedMetric: n.DetailedMetric, ValueToMetric: n.ValueToMetric, ShareThreshold: n.ShareThreshold}
		if l := n.Limit; l != nil {
			d.RateLimit = &RateLimitSummary{Name: l.Name, Unlimited: l.Unlimited, Replaces: l.Replaces}
			if !l.Unlimited {
				d.RateLimit.Unit = strings.ToLower(l.Unit.String())
				d.RateLimit.RequestsPerUnit = l.RequestsPerUnit
			}
		}
		out = append(out, d)
	}
	return out
}

// Config returns the configuration in force (the last one given to
// NewService or SetConfig).
func (s *Service) Config() *Config { return s.cfg.Load() }
