package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/tracing"
)

// The Transport makes an outgoing request's traceparent the parent of its
// gate's span, and sends the request's trace headers on unchanged.
func TestTransportTraceParent(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("traceparent"))
	}))
	defer srv.Close()
	var rec tracing.Recorder
	c, _ := client(t, gate.Config{Name: "upstream", Limit: bucket.Limit{Capacity: 10, Rate: 10}, Tracer: &rec})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("traceparent", tp)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(got) != 1 || got[0] != tp {
		t.Fatalf("upstream saw traceparent %q", got)
	}
	s := rec.Named("sluice.gate.acquire")
	if len(s) != 1 || s[0].TraceID != tp[3:35] || s[0].Parent != tp[36:52] || s[0].Attr("sluice.gate") != "upstream" {
		t.Fatalf("gate span %+v", s)
	}
}
