// Tests of the conversion of RateLimitConfig resources to the file format and to a Config.

package xds_test

import (
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/envoyrls/xds"
)

// TestYAMLFields: every field the proto carries is written when set, in
// the file format's names, and none when not set.
func TestYAMLFields(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"team": "red"})
	if err != nil {
		t.Fatal(err)
	}
	c := &rlsconf.RateLimitConfig{Name: "r", Domain: "web", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "user", Value: "true", ShadowMode: true, DetailedMetric: true, QuotaMode: true, Metadata: md,
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 7, Name: "per_user",
			Replaces: []*rlsconf.RateLimitReplace{{Name: "old"}}},
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "path", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}},
	}}}
	b, err := xds.YAML(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `domain: "web"
descriptors:
    - key: "user"
      value: "true"
      rate_limit:
        unit: "HOUR"
        requests_per_unit: 7
        name: "per_user"
        replaces:
            - name: "old"
      shadow_mode: true
      detailed_metric: true
      quota_mode: true
      metadata:
        team: red
      descriptors:
        - key: "path"
          rate_limit:
            unlimited: true
`
	if string(b) != want {
		t.Errorf("YAML:\n%s\nwant:\n%s", b, want)
	}
}

// TestConvertParses: a resource means what the same file means; the
// problems name the resource and the field.
func TestConvertParses(t *testing.T) {
	good, err := anypb.New(&rlsconf.RateLimitConfig{Name: "r1", Domain: "web", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 3, Name: "u"}},
		{Key: "path", Value: "/a*", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "m", Value: "GET", ShadowMode: true, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 1}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := xds.Convert([]*anypb.Any{good})
	if err != nil {
		t.Fatal(err)
	}
	web := cfg.Domains["web"]
	if web == nil || len(web.Children) != 2 {
		t.Fatalf("web: %+v", web)
	}
	if l := web.Children[0].Limit; l == nil || l.RequestsPerUnit != 3 || l.Name != "u" {
		t.Errorf("user limit %+v", l)
	}
	if n := web.Children[1].Children[0]; n.Value != "GET" || !n.Shadow || n.Limit.RequestsPerUnit != 1 {
		t.Errorf("path/m node %+v", n)
	}

	bad, err := anypb.New(&rlsconf.RateLimitConfig{Name: "r2", Domain: "api", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "a", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}},
		{Key: "b", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "c", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = xds.Convert([]*anypb.Any{good, bad})
	if err == nil {
		t.Fatal("a limit without a unit converted")
	}
	want := `resource "r2": descriptors[1].descriptors[0].rate_limit: rate_limit needs a unit`
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
}

// TestConvertEmpty: no resource is a config of no domain.
func TestConvertEmpty(t *testing.T) {
	cfg, err := xds.Convert(nil)
	if err != nil || cfg == nil || len(cfg.Domains) != 0 {
		t.Fatalf("Convert(nil) = %v, %v", cfg, err)
	}
	var _ *envoyrls.Config = cfg
}

// TestConvertWrongType: a resource of another type is refused.
func TestConvertWrongType(t *testing.T) {
	a, err := anypb.New(structpb.NewStringValue("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := xds.Convert([]*anypb.Any{a}); err == nil || !strings.Contains(err.Error(), "not a RateLimitConfig") {
		t.Errorf("Convert(a Value) error %v", err)
	}
}

// TestConvertReferenceFields: the fields the reference added since v0.1.0
// of the proto (quota_mode, field 7) and those before it (replaces,
// detailed_metric, metadata) reach the Config as from a file.
func TestConvertReferenceFields(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"team": "red"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := anypb.New(&rlsconf.RateLimitConfig{Name: "r", Domain: "web", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "user", QuotaMode: true, DetailedMetric: true, Metadata: md,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 7, Name: "per_user",
				Replaces: []*rlsconf.RateLimitReplace{{Name: "global"}}}},
		{Key: "all", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 100, Name: "global"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := xds.Convert([]*anypb.Any{a})
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Domains["web"].Children[0]
	if !u.Quota || !u.DetailedMetric || u.Limit == nil || len(u.Limit.Replaces) != 1 || u.Limit.Replaces[0] != "global" {
		t.Errorf("user node: quota %v detailed %v limit %+v", u.Quota, u.DetailedMetric, u.Limit)
	}
}
