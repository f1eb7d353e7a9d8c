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
  - name: provider_tpm
    key: "provider:{provider}"
    capacity: 10
    refill_per_second: 0.01
    fair_share: {by: tenant, weights: {acme: 3}, active_window: 1h}
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

test("fair shares: while the bucket is contended a tenant is held to its weighted share, shown in fairShare", async () => {
  const p = `p${process.hrtime.bigint()}`;
  const ask = async (tenant, cost) => {
    const d = await c.check({ descriptors: { provider: p, tenant }, cost });
    return [d.allowed, d.limits[0].fairShare];
  };
  assert.deepEqual(await ask("zed", 1), [true, { tenant: "zed", weight: 1, refused: false }]); // uncontended: 9 left
  assert.deepEqual(await ask("acme", 5), [true, { tenant: "acme", weight: 3, refused: false }]); // 4 left: contended
  assert.deepEqual(await ask("zed", 1), [true, { tenant: "zed", weight: 1, refused: false }]); // zed's share (1 of 4): once
  assert.deepEqual(await ask("zed", 1), [false, { tenant: "zed", weight: 1, refused: true }]); // not twice
  for (let i = 0; i < 3; i++) assert.deepEqual(await ask("acme", 1), [true, { tenant: "acme", weight: 3, refused: false }]);
  assert.deepEqual(await ask("acme", 1), [false, { tenant: "acme", weight: 3, refused: false }]); // the bucket's refusal
  assert.equal((await c.check({ descriptors: { user: p }, cost: 0 })).limits[0].fairShare, undefined);
});
