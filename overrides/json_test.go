package overrides_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overrides"
)

func TestMarshalJSON(t *testing.T) {
	o := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "acme"},
		Params: overrides.Params{Capacity: 500, RefillPerSecond: 50}, TTL: 86400, Note: "trial"}
	o.Stamp(time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC), time.Time{})
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"tenant_api","match":{"tenant":"acme"},"capacity":500,"refill_per_second":50,"ttl_s":86400,"note":"trial","source":"api",` +
		`"created_at":"2026-12-02T01:02:03.456Z","updated_at":"2026-12-02T01:02:03.456Z","expires_at":"2026-12-03T01:02:03.456Z"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	d := overrides.Override{Name: "l", Params: overrides.Params{Deny: true, Window: 90 * time.Minute}}
	d.Stamp(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{})
	b, _ = json.Marshal(d)
	want = `{"name":"l","match":{},"window":"1h30m","deny":true,"source":"api","created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z","expires_at":null}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	l := overrides.Listed{Override: d, MatchedTotal: 3}
	b, _ = json.Marshal(l)
	if !strings.HasSuffix(string(b), `"expires_at":null,"matched_total":3,"last_matched_at":null}`) {
		t.Fatalf("listed: %s", b)
	}
	var back overrides.Override
	if err := json.Unmarshal([]byte(`{"name":"tenant_api","match":{"tenant":"acme"},"capacity":500,"source":"policy","created_at":"2026-12-02T01:02:03.456Z","updated_at":"2026-12-02T01:02:03.456Z","expires_at":null}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Source != overrides.SourcePolicy || back.Capacity != 500 || !back.ExpiresAt.IsZero() {
		t.Fatalf("decoded %+v", back)
	}
}

func TestCanonicalMatch(t *testing.T) {
	for m, want := range map[*map[string]string]string{
		{}:                                      `{}`,
		{"b": "2", "a": "1"}:                    `{"a":"1","b":"2"}`,
		{"t": "<&>\"\\\n\u00e9"}:                `{"t":"<&>\"\\\n` + "\u00e9" + `"}`,
		{"B": "x", "a": "y", "_": "z", "1": ""}: `{"1":"","B":"x","_":"z","a":"y"}`,
	} {
		if got := overrides.CanonicalMatch(*m); got != want {
			t.Errorf("CanonicalMatch(%v) = %s, want %s", *m, got, want)
		}
	}
	if overrides.CanonicalMatch(nil) != "{}" {
		t.Error("nil match is not {}")
	}
}

func TestDecodeRequest(t *testing.T) {
	ok := `{"name": "tenant_api", "match": {"tenant": "acme"}, "capacity": 500, "refill_per_second": 50, "ttl_s": 86400, "note": "trial"}`
	o, err := overrides.DecodeRequest([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := overrides.Override{Name: "tenant_api", Match: map[string]string{"tenant": "acme"},
		Params: overrides.Params{Capacity: 500, RefillPerSecond: 50}, TTL: 86400, Note: "trial"}
	if !reflect.DeepEqual(*o, want) {
		t.Fatalf("decoded %+v", *o)
	}
	if o, err := overrides.DecodeRequest([]byte(`{"name":"x","match":{},"window":"7d","block_for":"10m","deny":false,"unlimited":true,"source":"api","n\u0061me":"y"}`)); err == nil {
		t.Fatalf("a key given twice through an escape decoded: %+v", o)
	}
	o, err = overrides.DecodeRequest([]byte(`{"name":"x","match":{},"window":"7d","refill":"100/m","shadow":true,"source":"api"}`))
	if err != nil || o.Window != 7*24*time.Hour || o.Refill != "100/m" || !o.Shadow || o.Source != overrides.SourceAPI {
		t.Fatalf("decoded %+v, %v", o, err)
	}
	for _, c := range []struct{ body, in string }{
		{``, "one JSON object"},
		{`[]`, "one JSON object"},
		{`{"name":"x","match":{}} {}`, "nothing after it"},
		{`{"name":"x","match":{}`, "malformed"},
		{`{"name":"x"}`, "missing match"},
		{`{"name":"x","match":{},"Capacity":5}`, `did you mean "capacity"`},
		{`{"name":"x","match":{},"capacityy":5}`, `unknown field "capacityy"`},
		{`{"name":"x","match":{},"capacity":5,"capacity":6}`, "given twice"},
		{`{"name":"x","match":{"t":"a","t":"b"}}`, "given twice"},
		{`{"name":"x","match":{"t":1}}`, "must be a string"},
		{`{"name":"x","match":{"t":null}}`, "must be a string"},
		{`{"name":"x","match":[]}`, "object"},
		{`{"name":"x","match":{},"capacity":1.5}`, "whole number"},
		{`{"name":"x","match":{},"capacity":1e3}`, "whole number"},
		{`{"name":"x","match":{},"capacity":"5"}`, "whole number"},
		{`{"name":"x","match":{},"capacity":0}`, "at least 1"},
		{`{"name":"x","match":{},"capacity":null}`, "null"},
		{`{"name":"x","match":{},"refill_per_second":0}`, "positive"},
		{`{"name":"x","match":{},"refill_per_second":"5"}`, "not a number"},
		{`{"name":"x","match":{},"window":"fortnight"}`, "not a duration"},
		{`{"name":"x","match":{},"window":60}`, "not a duration"},
		{`{"name":"x","match":{},"window":"-1s"}`, "positive"},
		{`{"name":"x","match":{},"deny":"yes"}`, "true or false"},
		{`{"name":"x","match":{},"deny":true,"capacity":3}`, "deny takes no parameters"},
		{`{"name":"x","match":{"t":"a*b"}}`, "may only end"},
		{`{"name":"x","match":{},"source":"policy"}`, `source must be "api"`},
		{`{"name":"x","match":{},"created_at":"2026-01-01T00:00:00Z"}`, "set by the server"},
		{`{"name":"x","match":{},"ttl_s":-5}`, "at least 1"},
		{`{"match":{}}`, "missing name"},
	} {
		_, err := overrides.DecodeRequest([]byte(c.body))
		if !errors.Is(err, overrides.ErrBadRequest) || !strings.Contains(err.Error(), c.in) {
			t.Errorf("DecodeRequest(%s) = %v, want ErrBadRequest saying %q", c.body, err, c.in)
		}
	}
}

func TestDecodeKey(t *testing.T) {
	name, m, err := overrides.DecodeKey([]byte(`{"name":"l","match":{"tenant":"acme"}}`))
	if err != nil || name != "l" || m["tenant"] != "acme" {
		t.Fatalf("DecodeKey = %q %v %v", name, m, err)
	}
	for _, body := range []string{`{"name":"l"}`, `{"match":{}}`, `{"name":"l","match":{},"capacity":1}`} {
		if _, _, err := overrides.DecodeKey([]byte(body)); !errors.Is(err, overrides.ErrBadRequest) {
			t.Errorf("DecodeKey(%s) = %v, want ErrBadRequest", body, err)
		}
	}
}

// FuzzDecodeRequest: any body decodes to an override whose own fields are
// valid and whose JSON decodes back to it, or is refused as ErrBadRequest;
// it never panics.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"name": "tenant_api", "match": {"tenant": "acme"}, "capacity": 500, "refill_per_second": 50, "ttl_s": 86400, "note": "trial"}`,
		`{"name":"x","match":{"a":"p*","b":"*"},"deny":true,"shadow":true}`,
		`{"name":"x","match":{},"window":"7d","limit":3,"block_for":"1h30m"}`,
		`{"name":"x","match":{},"refill":"100/m","unlimited":false}`,
		`{"name":"x","match":{"t":"a\u002ab"}}`,
		`{"name":"x","match":{},"capacity":1,"capacity":2}`,
		`{"name":"x","match":{},"refill_per_second":1e-300}`,
	} {
		f.Add([]byte(s))
	}
	p := mustPolicy(f, testPolicy)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := overrides.DecodeRequest(body)
		if err != nil {
			if !errors.Is(err, overrides.ErrBadRequest) {
				t.Fatalf("DecodeRequest(%q) = %v, not ErrBadRequest", body, err)
			}
			return
		}
		for _, v := range o.Match {
			if i := strings.IndexByte(v, '*'); i >= 0 && i != len(v)-1 {
				t.Fatalf("accepted a value with * inside: %q", v)
			}
		}
		if o.Deny && (o.Capacity != 0 || o.RefillPerSecond != 0 || o.Refill != "" || o.Limit != 0 || o.Window != 0 || o.MaxInFlight != 0) {
			t.Fatalf("accepted deny with parameters: %+v", o)
		}
		o.Stamp(time.Unix(1e9, 0), time.Time{})
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var back overrides.Override
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("the JSON of an accepted override does not decode: %s: %v", b, err)
		}
		if o.Source == "" {
			o.Source = overrides.SourceAPI
		}
		if len(o.Match) == 0 {
			o.Match, back.Match = nil, nil
		}
		if !reflect.DeepEqual(back, *o) {
			t.Fatalf("round trip of %s:\n%+v\nwant\n%+v", b, back, *o)
		}
		_ = overrides.Validate(o, p) // (must not panic)
	})
}
