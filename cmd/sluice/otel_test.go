// Traces (--otel) against a real OpenTelemetry Collector (tools/otelcol):
// a check joins its caller's trace with the decision's attributes, the
// sampler follows OTEL_TRACES_SAMPLER, and a collector that is down
// changes no decision and counts export errors.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/testbin"
)

// collector is a running OpenTelemetry Collector writing what it receives
// to a file.
type collector struct {
	grpc, http string // OTLP endpoints, http://127.0.0.1:port
	file       string
}

// startCollector starts the Collector tools/otelcol builds ($SLUICE_OTELCOL).
func startCollector(t *testing.T) *collector {
	t.Helper()
	bin := testbin.Need(t, testbin.Otelcol)
	dir := t.TempDir()
	g, h := freePort(t), freePort(t)
	c := &collector{grpc: "http://" + g, http: "http://" + h, file: filepath.Join(dir, "traces.jsonl")}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 50ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, g, h, c.file)
	cfgPath := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	logf, _ := os.Create(filepath.Join(dir, "otelcol.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range []string{g, h} {
		for {
			conn, err := net.Dial("tcp", a)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(dir, "otelcol.log"))
				t.Fatalf("the collector does not listen on %s: %s", a, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// otlpSpan is a span as the file exporter writes it (OTLP JSON), with its
// attributes flattened.
type otlpSpan struct {
	TraceID, SpanID, ParentSpanID, Name string
	Kind                                int
	Attrs                               map[string]any
	Events                              []string
	Service                             string
}

// spans reads every span the collector has written so far.
func (c *collector) spans(t *testing.T) []otlpSpan {
	t.Helper()
	f, err := os.Open(c.file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type kv struct {
		Key   string         `json:"key"`
		Value map[string]any `json:"value"`
	}
	var out []otlpSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var line struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []kv `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []struct {
						TraceID      string `json:"traceId"`
						SpanID       string `json:"spanId"`
						ParentSpanID string `json:"parentSpanId"`
						Name         string `json:"name"`
						Kind         int    `json:"kind"`
						Attributes   []kv   `json:"attributes"`
						Events       []struct {
							Name string `json:"name"`
						} `json:"events"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			continue // (a line being written)
		}
		for _, rs := range line.ResourceSpans {
			service := ""
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					service, _ = a.Value["stringValue"].(string)
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					o := otlpSpan{TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, Name: s.Name, Kind: s.Kind,
						Attrs: map[string]any{}, Service: service}
					for _, a := range s.Attributes {
						o.Attrs[a.Key] = flatValue(a.Value)
					}
					for _, e := range s.Events {
						o.Events = append(o.Events, e.Name)
					}
					out = append(out, o)
				}
			}
		}
	}
	return out
}

// flatValue is an OTLP JSON AnyValue as a Go value: a string, an int64
// (intValue is a JSON string), a float64, a bool or a []any.
func flatValue(v map[string]any) any {
	for k, x := range v {
		switch k {
		case "intValue":
			var n int64
			fmt.Sscan(fmt.Sprint(x), &n)
			return n
		case "arrayValue":
			var out []any
			vals, _ := x.(map[string]any)["values"].([]any)
			for _, e := range vals {
				out = append(out, flatValue(e.(map[string]any)))
			}
			return out
		default:
			return x
		}
	}
	return nil
}

// waitSpans waits until the collector has spans satisfying ok.
func (c *collector) waitSpans(t *testing.T, what string, ok func([]otlpSpan) bool) []otlpSpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := c.spans(t)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s among the %d spans the collector has: %+v", what, len(s), s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func spanNamed(spans []otlpSpan, name, traceID string) *otlpSpan {
	for i := range spans {
		if spans[i].Name == name && (traceID == "" || spans[i].TraceID == traceID) {
			return &spans[i]
		}
	}
	return nil
}

// otelEnv sets the variables of an exporter to endpoint with protocol
// proto, exporting every 50 ms.
func otelEnv(t *testing.T, proto, endpoint string) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "sluice-test")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
}

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
)

func TestOTelCheckJoinsCallersTrace(t *testing.T) {
	col := startCollector(t)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			endpoint := col.grpc
			if proto != "grpc" {
				endpoint = col.http
			}
			otelEnv(t, proto, endpoint)
			tid := traceID[:30] + map[string]string{"grpc": "01", "http/protobuf": "02"}[proto]
			dir := t.TempDir()
			pol := filepath.Join(dir, "sluice.yaml")
			writePolicy(t, pol, servePolicy+"request_descriptors:\n  tenant: {from: header, name: X-Tenant}\n")
			p := serve(t, "--config", pol, "--otel", "--grpc", "127.0.0.1:0")
			tp := "00-" + tid + "-" + parentID + "-01"
			for i, want := range []int{200, 200, 429} {
				if code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "acme"}}`, "traceparent", tp); code != want {
					t.Fatalf("check %d: %d %s", i, code, body)
				}
			}
			spans := col.waitSpans(t, "refused check of trace "+tid, func(s []otlpSpan) bool {
				n := 0
				for _, x := range s {
					if x.TraceID == tid && x.Name == "POST /v1/check" {
						n++
					}
				}
				return n == 3
			})
			var refused *otlpSpan
			for i := range spans {
				if s := &spans[i]; s.TraceID == tid && s.Name == "POST /v1/check" {
					if s.ParentSpanID != parentID {
						t.Fatalf("check span's parent %q, want the caller's %s", s.ParentSpanID, parentID)
					}
					if s.Kind != 2 { // SPAN_KIND_SERVER
						t.Errorf("kind %d, want server", s.Kind)
					}
					if s.Service != "sluice-test" {
						t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", s.Service)
					}
					if s.Attrs["sluice.decision"] == "refused" {
						refused = s
					}
				}
			}
			if refused == nil {
				t.Fatalf("no refused check span: %+v", spans)
			}
			a := refused.Attrs
			if fmt.Sprint(a["sluice.limits"]) != "[tenant_api]" || fmt.Sprint(a["sluice.keys"]) != "[tenant:acme]" ||
				fmt.Sprint(a["sluice.refused_by"]) != "[tenant_api]" || a["http.response.status_code"] != int64(429) || a["sluice.shadow"] != false {
				t.Fatalf("refused span's attributes: %v", a)
			}
			if _, ok := a["sluice.retry_after_ms"]; !ok {
				t.Fatalf("no retry_after_ms: %v", a)
			}
			// A child span per store call.
			var store *otlpSpan
			for i := range spans {
				if spans[i].Name == "sluice.store.take" && spans[i].ParentSpanID == refused.SpanID {
					store = &spans[i]
				}
			}
			if store == nil || store.Attrs["sluice.store.items"] != int64(1) || store.Attrs["sluice.store.latency_ms"] == nil {
				t.Fatalf("store span under the refused check: %+v", store)
			}
			// The refusal's log record carries the trace.
			p.waitLog(t, `"trace_id":"`+tid+`","span_id":"`+refused.SpanID+`"`)

			// Forward-auth and gRPC ShouldRateLimit join the caller's trace too.
			if code, _ := call(t, p, "GET", "/v1/auth", "", "X-Tenant", "other", "traceparent", tp); code != 200 {
				t.Fatalf("/v1/auth: %d", code)
			}
			_, c := dialRLS(t, p)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", tp)
			req := ipRequest("10.9.9.9")
			req.Descriptors[0].Entries[0].Key = "tenant"
			if _, err := c.ShouldRateLimit(ctx, req); err != nil {
				t.Fatal(err)
			}
			spans = col.waitSpans(t, "auth and gRPC spans", func(s []otlpSpan) bool {
				return spanNamed(s, "GET /v1/auth", tid) != nil && spanNamed(s, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", tid) != nil
			})
			g := spanNamed(spans, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", tid)
			if g.ParentSpanID != parentID || g.Attrs["sluice.decision"] != "allowed" || fmt.Sprint(g.Attrs["sluice.limits"]) != "[tenant_api]" {
				t.Fatalf("gRPC span: %+v", g)
			}
			if au := spanNamed(spans, "GET /v1/auth", tid); au.ParentSpanID != parentID || au.Attrs["sluice.decision"] != "allowed" {
				t.Fatalf("auth span: %+v", au)
			}
		})
	}
}

func TestOTelSamplerRatio(t *testing.T) {
	col := startCollector(t)
	otelEnv(t, "grpc", col.grpc)
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	writePolicy(t, pol, "limits:\n  - name: t\n    key: \"tenant:{tenant}\"\n    capacity: 1000\n    refill_per_second: 1000\n")
	p := serve(t, "--config", pol, "--otel")
	// Ratio 0: no root span is sampled, nor a child of an unsampled parent.
	for i := range 50 {
		hdr := []string{}
		if i%2 == 1 {
			hdr = []string{"traceparent", "00-" + traceID[:30] + "aa-" + parentID + "-00"}
		}
		if code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "a"}}`, hdr...); code != 200 {
			t.Fatalf("check %d: %d %s", i, code, body)
		}
	}
	// A sampled parent is followed (parentbased): its span comes, and only it.
	tid := traceID[:30] + "bb"
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "a"}}`, "traceparent", "00-"+tid+"-"+parentID+"-01"); code != 200 {
		t.Fatal(code)
	}
	spans := col.waitSpans(t, "the sampled parent's check", func(s []otlpSpan) bool { return spanNamed(s, "POST /v1/check", tid) != nil })
	for _, s := range spans {
		if s.TraceID != tid {
			t.Fatalf("a span of an unsampled trace was exported: %+v", s)
		}
	}
}

func TestOTelCollectorDown(t *testing.T) {
	otelEnv(t, "grpc", "http://"+freePort(t)) // nothing listens there
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
	dir := t.TempDir()
	pol := filepath.Join(dir, "sluice.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--otel")
	start := time.Now()
	for i := range 10 {
		want := 429
		if i < 2 {
			want = 200
		}
		if code, body := call(t, p, "POST", "/v1/check", `{"descriptors": {"tenant": "acme"}}`); code != want {
			t.Fatalf("check %d with the collector down: %d %s", i, code, body)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("10 checks took %v with the collector down", d)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, m := call(t, p, "GET", "/metrics", "")
		if v := metricValue(m, "sluice_otel_export_errors_total"); v > 0 {
			if metricValue(m, "sluice_otel_spans_failed_total") < 1 {
				t.Fatalf("export errors %v but no spans failed:\n%s", v, m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice_otel_export_errors_total still 0:\n%s", m)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// metricValue is the value of an unlabelled metric in a /metrics body (-1
// when absent).
func metricValue(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}
