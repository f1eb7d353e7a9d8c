// BenchmarkServeCheck: one /v1/check through the handler in process, the
// row BENCHMARKS.md's tracing overhead compares (tracing off here; cmd/sluice
// BenchmarkOTelCheck measures it on).

package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

// benchServeCheck runs b.N checks of one key (always admitted) through
// cfg's handler; cfg gets the limiter.
func benchServeCheck(b *testing.B, cfg server.Config) {
	p, err := policy.Parse([]byte("limits:\n  - name: tenant_api\n    key: \"tenant:{tenant}\"\n    capacity: 1000000000\n    refill_per_second: 1000000000\n"))
	if err != nil {
		b.Fatal(err)
	}
	cfg.Limiter, err = limiter.New(p, memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	s, err := server.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	body := `{"descriptors": {"tenant": "acme"}}`
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

func BenchmarkServeCheck(b *testing.B) { benchServeCheck(b, server.Config{}) }
