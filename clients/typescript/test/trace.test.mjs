// The W3C trace context the client sends (traceHeaders), seen by a real HTTP server on loopback that records it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { Client, traceFields } from "../dist/index.js";

const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
let srv, url;
const seen = [];

before(async () => {
  srv = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push(req.headers);
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ allowed: true, retry_after_ms: 0, limits: [] }));
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${srv.address().port}`;
});
after(() => new Promise((r) => srv.close(r)));

test("traceHeaders: traceparent and tracestate are sent, nothing else of it", async () => {
  seen.length = 0;
  const c = new Client({ url, traceHeaders: () => ({ TraceParent: TP, tracestate: "v=1", authorization: "x", baggage: "b" }) });
  await c.check({ descriptors: { tenant: "a" } });
  assert.equal(seen[0].traceparent, TP);
  assert.equal(seen[0].tracestate, "v=1");
  assert.equal(seen[0].baggage, undefined);
  assert.equal(seen[0].authorization, undefined);
});

test("no traceHeaders, or a malformed traceparent: nothing sent", async () => {
  seen.length = 0;
  await new Client({ url }).check({ descriptors: { tenant: "a" } });
  await new Client({ url, traceHeaders: () => ({ traceparent: "nope" }) }).check({ descriptors: { tenant: "a" } });
  assert.equal(seen[0].traceparent, undefined);
  assert.equal(seen[1].traceparent, undefined);
  assert.deepEqual(traceFields(() => ({ traceparent: TP.toUpperCase() })), {});
  assert.throws(() => new Client({ url, traceHeaders: "x" }), TypeError);
});
