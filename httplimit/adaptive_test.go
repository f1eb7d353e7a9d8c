// Tests of the transport's overload verdicts on an adaptive gate.

package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
)

// A 429, 503 or 529 without a hint lowers an adaptive gate's ceiling; one
// with a Retry-After pauses it instead; a 200 does neither; a classifier
// replaces the verdict.
func TestTransportOverload(t *testing.T) {
	status, hint := 200, ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hint != "" {
			w.Header().Set("Retry-After", hint)
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	mk := func(opts ...TransportOption) (*gate.Gate, *http.Client) {
		g, err := gate.New(gate.Config{Limit: bucket.PerSecond(1000), MaxQueue: 10,
			Adaptive: &gate.Adaptive{Min: 10, Cooldown: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return g, &http.Client{Transport: NewTransport(nil, g, opts...)}
	}
	get := func(c *http.Client) {
		res, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	for _, tc := range []struct {
		status int
		hint   string
		lowers bool
	}{{200, "", false}, {429, "", true}, {503, "", true}, {529, "", true}, {429, "0", false}, {500, "", false}} {
		status, hint = tc.status, tc.hint
		g, c := mk()
		get(c)
		if lowered := g.Refill() < 1000; lowered != tc.lowers {
			t.Errorf("%d (Retry-After %q): lowered %v, want %v (refill %v)", tc.status, tc.hint, lowered, tc.lowers, g.Refill())
		}
	}
	status, hint = 500, ""
	g, c := mk(WithOverloadClassifier(func(r *http.Response) bool { return r.StatusCode >= 500 }))
	get(c)
	if g.Refill() >= 1000 {
		t.Errorf("a classifier's verdict lowers: %v", g.Refill())
	}
}
