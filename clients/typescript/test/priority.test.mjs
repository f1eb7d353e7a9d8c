// Priority classes against a real `sluice serve`: `priority` names the request's class (docs/behaviour.md section 7).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, BadRequestError } from "../dist/index.js";
import { serve } from "../support/serve.mjs";

const POLICY = `
priorities:
  - name: interactive
  - name: batch
    reserve: 0.5
    max_queue_ms: 0
limits:
  - name: api
    key: "user:{user}"
    capacity: 10
    refill_per_second: 0.001
`;

let srv, c;
before(async () => {
  srv = await serve(POLICY);
  c = new Client({ url: srv.url });
});
after(async () => { await srv?.stop(); });

test("batch stops at its half of the bucket, interactive takes the rest, an unknown class is unknown_priority", async () => {
  const u = { user: `u${process.hrtime.bigint()}` };
  let d = await c.check({ descriptors: u, cost: 5, priority: "batch" });
  assert.equal(d.allowed, true);
  assert.equal(d.priority, "batch");
  assert.equal(d.limits[0].tokensRemaining, 0);
  assert.deepEqual([d.limits[0].priority, d.limits[0].retryAfter], ["batch", 0]);
  const r = await c.check({ descriptors: u, cost: 1, priority: "batch" });
  assert.equal(r.allowed, false);
  assert.ok(r.limits[0].retryAfter > 0, JSON.stringify(r.limits[0]));
  d = await c.check({ descriptors: u, cost: 5, priority: "interactive" });
  assert.equal(d.allowed, true);
  assert.equal(d.priority, "interactive");
  await assert.rejects(c.check({ descriptors: u, cost: 1, priority: "bulk" }), (e) => e instanceof BadRequestError && e.code === "unknown_priority");
  await assert.rejects(c.check({ descriptors: u, priority: "" }), TypeError);
});
