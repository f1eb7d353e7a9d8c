// The Python and TypeScript clients send their caller's traceparent: the
// check's span arrives at a real Collector as the caller's child.

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestOTelClientsJoinCallersTrace(t *testing.T) {
	needClients(t)
	col := startCollector(t)
	otelEnv(t, "http/protobuf", col.http)
	pol := filepath.Join(t.TempDir(), "sluice.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--otel")
	py, _ := filepath.Abs(filepath.Join("..", "..", "clients", "python"))
	ts, _ := filepath.Abs(filepath.Join("..", "..", "clients", "typescript", "dist", "index.js"))
	pyTrace, tsTrace := traceID[:30]+"c1", traceID[:30]+"c2"
	runs := []*exec.Cmd{
		exec.Command(python3, "-c", `import sys; sys.path.insert(0, sys.argv[1]); import sluice_client as s
with s.trace(sys.argv[3]):
    s.Client(sys.argv[2]).check({"tenant": "py"})`, py, p.addr, "00-"+pyTrace+"-"+parentID+"-01"),
		exec.Command(node, "--input-type=module", "-e", `const [ts, url, tp] = process.argv.slice(1);
const { Client } = await import(ts);
await new Client({ url, traceHeaders: () => ({ traceparent: tp }) }).check({ descriptors: { tenant: "ts" } });`,
			"file://"+ts, p.addr, "00-"+tsTrace+"-"+parentID+"-01"),
	}
	for _, c := range runs {
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c.Args[:2], err, out)
		}
	}
	spans := col.waitSpans(t, "the clients' checks", func(s []otlpSpan) bool {
		return spanNamed(s, "POST /v1/check", pyTrace) != nil && spanNamed(s, "POST /v1/check", tsTrace) != nil
	})
	for _, id := range []string{pyTrace, tsTrace} {
		s := spanNamed(spans, "POST /v1/check", id)
		if s.ParentSpanID != parentID || !strings.HasPrefix(s.Attrs["sluice.keys"].([]any)[0].(string), "tenant:") {
			t.Fatalf("span of trace %s: %+v", id, s)
		}
	}
}
