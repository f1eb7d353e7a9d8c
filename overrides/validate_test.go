package overrides_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

func TestValidate(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	tenant := map[string]string{"tenant": "acme"}
	type P = overrides.Params
	for _, c := range []struct {
		name string
		o    overrides.Override
		want error // nil: valid
		in   string
	}{
		{"bucket", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Capacity: 500, RefillPerSecond: 50}}, nil, ""},
		{"refill string", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Refill: "100/m"}}, nil, ""},
		{"window", overrides.Override{Name: "daily", Match: map[string]string{"user": "u1"}, Params: P{Limit: 5, Window: time.Hour}}, nil, ""},
		{"quota", overrides.Override{Name: "monthly", Match: tenant, Params: P{Limit: 5}}, nil, ""},
		{"concurrency", overrides.Override{Name: "inflight", Match: tenant, Params: P{MaxInFlight: 50}}, nil, ""},
		{"deny", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Deny: true}}, nil, ""},
		{"unlimited shadow", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Unlimited: true, Shadow: true}}, nil, ""},
		{"when descriptor", overrides.Override{Name: "export", Match: map[string]string{"route": "/export", "tenant": "premium_*"}}, nil, ""},
		{"empty match", overrides.Override{Name: "global", Match: nil, Params: P{Capacity: 5}}, nil, ""},
		{"block_for", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{BlockFor: time.Minute}}, nil, ""},

		{"unknown limit", overrides.Override{Name: "nope", Match: tenant}, overrides.ErrUnknownLimit, `no limit "nope"`},
		{"kind mismatch", overrides.Override{Name: "daily", Match: map[string]string{"user": "u"}, Params: P{Capacity: 5}}, overrides.ErrKindMismatch, "capacity is a field of token_bucket limits"},
		{"limit on bucket", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Limit: 5}}, overrides.ErrKindMismatch, "sliding_window, fixed_window and quota limits"},
		{"window on quota", overrides.Override{Name: "monthly", Match: tenant, Params: P{Window: time.Hour}}, overrides.ErrKindMismatch, "window"},
		{"max_in_flight on bucket", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{MaxInFlight: 5}}, overrides.ErrKindMismatch, "concurrency"},
		{"unknown descriptor", overrides.Override{Name: "tenant_api", Match: map[string]string{"tennant": "a"}}, overrides.ErrUnknownDescriptor, `"tennant"`},
		{"star inside", overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "a*b"}}, overrides.ErrBadRequest, "may only end a value"},
		{"two stars", overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "**"}}, overrides.ErrBadRequest, "may only end"},
		{"deny with parameters", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Deny: true, Capacity: 5}}, overrides.ErrBadRequest, "deny takes no parameters"},
		{"deny and unlimited", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Deny: true, Unlimited: true}}, overrides.ErrBadRequest, "not both"},
		{"deny block_for", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Deny: true, BlockFor: time.Second}}, overrides.ErrBadRequest, "block_for"},
		{"both rates", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{RefillPerSecond: 1, Refill: "1/s"}}, overrides.ErrBadRequest, "not both"},
		{"bad rate", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Refill: "100/fortnight"}}, overrides.ErrBadRequest, "unknown unit"},
		{"negative capacity", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Capacity: -1}}, overrides.ErrBadRequest, "positive"},
		{"capacity too big", overrides.Override{Name: "tenant_api", Match: tenant, Params: P{Capacity: 1 << 62}}, overrides.ErrBadRequest, "capacity"},
		{"shadow concurrency", overrides.Override{Name: "inflight", Match: tenant, Params: P{Shadow: true}}, overrides.ErrBadRequest, "shadow"},
		{"never matches when", overrides.Override{Name: "export", Match: map[string]string{"route": "/import"}}, overrides.ErrBadRequest, "never match"},
		{"no name", overrides.Override{Match: tenant}, overrides.ErrBadRequest, "missing name"},
		{"bad descriptor name", overrides.Override{Name: "tenant_api", Match: map[string]string{"a b": "x"}}, overrides.ErrBadRequest, "descriptor name"},
		{"bad source", overrides.Override{Name: "tenant_api", Match: tenant, Source: "file"}, overrides.ErrBadRequest, "source"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := overrides.Validate(&c.o, p)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var e *overrides.Error
			if !errors.Is(err, c.want) || !errors.As(err, &e) || !strings.Contains(err.Error(), c.in) {
				t.Fatalf("Validate = %v, want %v saying %q", err, c.want, c.in)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	o := &overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "acme"}, Params: overrides.Params{Capacity: 500, Shadow: true}}
	l, err := overrides.Effective(o, p)
	if err != nil {
		t.Fatal(err)
	}
	pl := p.Limit("tenant_api")
	if l.Bucket.Capacity != 500 || l.Bucket.Rate != 10 || !l.Shadow || pl.Bucket.Capacity != 100 || pl.Shadow {
		t.Fatalf("effective %+v (policy's %+v)", l.Bucket, pl.Bucket)
	}
	if k, ok := l.Match(map[string]string{"tenant": "acme", "user": "u"}); !ok || k != "tenant:acme:user:u" {
		t.Fatalf("the effective limit renders key %q, %v", k, ok)
	}
	o = &overrides.Override{Name: "daily", Match: map[string]string{"user": "u"}, Params: overrides.Params{Window: time.Hour}}
	if l, err = overrides.Effective(o, p); err != nil || l.Window.Window != time.Hour || l.Window.Limit != 1000 {
		t.Fatalf("effective window %+v, %v", l.Window, err)
	}
	o = &overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "acme"}, Params: overrides.Params{Refill: "60/m"}}
	if l, err = overrides.Effective(o, p); err != nil || l.Bucket.Rate != 1 || l.Bucket.Capacity != 100 {
		t.Fatalf("effective refill %+v, %v", l.Bucket, err)
	}
}
