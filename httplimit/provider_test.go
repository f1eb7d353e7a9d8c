package httplimit_test

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

var providerNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// The cases are testdata/provider_headers.json at the repository's root,
// which the Python and TypeScript clients' parsers read too.
func TestParseProviderLimits(t *testing.T) {
	raw, err := os.ReadFile("../testdata/provider_headers.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Now   time.Time
		Cases []struct {
			Name    string
			Headers [][2]string
			Want    []struct {
				Dimension, Name, Source string
				Limit, Remaining        int64
				ResetMS                 float64 `json:"reset_ms"`
			}
		}
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if !fx.Now.Equal(providerNow) || len(fx.Cases) < 10 {
		t.Fatalf("fixture: now %v, %d cases", fx.Now, len(fx.Cases))
	}
	for _, tc := range fx.Cases {
		h := http.Header{}
		for _, kv := range tc.Headers {
			h.Add(kv[0], kv[1])
		}
		var want []httplimit.ProviderLimit
		for _, w := range tc.Want {
			want = append(want, httplimit.ProviderLimit{Dimension: w.Dimension, Name: w.Name, Limit: w.Limit, Remaining: w.Remaining,
				Reset: time.Duration(w.ResetMS * float64(time.Millisecond)), Source: w.Source})
		}
		got := httplimit.ParseProviderLimitsAt(h, providerNow)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.Name, got, want)
		}
	}
}

func FuzzParseProviderLimits(f *testing.F) {
	for _, s := range [][2]string{
		{"x-ratelimit-reset-tokens", "6m0s"}, {"anthropic-ratelimit-tokens-reset", "2026-12-01T10:00:30Z"},
		{"RateLimit", `"a";r=1;t=2`}, {"RateLimit-Policy", `"a";q=10;w=60`}, {"X-RateLimit-Reset", "1796133600"},
		{"retry-after-ms", "1.5"}, {"Retry-After", "Tue, 01 Dec 2026 10:00:05 GMT"}, {"x-ratelimit-remaining-requests", "12"},
	} {
		f.Add(s[0], s[1], s[0], s[1])
	}
	dims := map[string]bool{"": true, "requests": true, "tokens": true, "input_tokens": true, "output_tokens": true}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		for _, l := range httplimit.ParseProviderLimitsAt(h, providerNow) {
			if l.Reset < 0 || l.Reset > httplimit.MaxProviderReset || l.Limit < -1 || l.Remaining < -1 || !dims[l.Dimension] || l.Source == "" {
				t.Fatalf("%q=%q %q=%q: %+v", k1, v1, k2, v2, l)
			}
			if l.Dimension == "" && l.Remaining != 0 {
				t.Fatalf("a retry hint with remaining %d", l.Remaining)
			}
		}
	})
}
