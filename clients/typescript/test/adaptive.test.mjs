// Adaptive limits against a real `sluice serve`: reportResponse of a 429 without hints lowers the key's ceiling (POST
// /v1/feedback), checks are decided under it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, BadRequestError } from "../dist/index.js";
import { serve } from "../support/serve.mjs";

const POLICY = `
limits:
  - name: tool
    key: "tool:{tool}"
    capacity: 10
    refill_per_second: 100
    adaptive: {min_refill_per_second: 10, increase_per_second: 0.001, cooldown: 1m}
`;

let srv, c;
let n = 0;
const tool = () => ({ tool: `t${++n}-${process.hrtime.bigint()}` });
before(async () => {
  srv = await serve(POLICY);
  c = new Client({ url: srv.url });
});
after(async () => { await srv?.stop(); });

test("a 429 without hints lowers the ceiling once per cooldown; checks are decided under it", async () => {
  const d = tool();
  assert.equal(await c.reportResponse({ status: 200, headers: {} }, { descriptors: d }), undefined);
  assert.equal(await c.reportResponse({ status: 429, headers: {} }, { descriptors: d }), undefined);
  let [f] = await c.feedback({ descriptors: d, outcome: "ok" });
  assert.ok(Math.abs(f.adaptiveRefillPerSecond - 50) < 0.01, JSON.stringify(f));
  assert.deepEqual([f.name, f.lowered, f.refillPerSecond, f.minRefillPerSecond], ["tool", false, 100, 10]);
  await c.reportResponse({ status: 529, headers: {} }, { descriptors: d });
  [f] = await c.feedback({ descriptors: d, outcome: "ok" });
  assert.ok(Math.abs(f.adaptiveRefillPerSecond - 50) < 0.01, "within the cooldown: no further drop");
  await c.check({ descriptors: d });
  const dec = await c.check({ descriptors: d });
  assert.ok(Math.abs(dec.limits[0].adaptiveRefillPerSecond - 50) < 0.01, JSON.stringify(dec.limits[0]));
  const st = (await c.stats()).limits.find((l) => l.name === "tool");
  assert.ok(Math.abs(st.adaptiveRefillPerSecond - 50) < 0.01, JSON.stringify(st));
});

test("a hint pauses instead; errors", async () => {
  const d = tool();
  assert.equal(await c.reportResponse({ status: 429, headers: { "retry-after": "1" } }, { descriptors: d }), 1);
  const [f] = await c.feedback({ descriptors: d, outcome: "ok" });
  assert.equal(f.adaptiveRefillPerSecond, 100);
  await assert.rejects(c.feedback({ descriptors: d, outcome: "slow" }), TypeError);
  await assert.rejects(c.feedback({ descriptors: d, outcome: "ok", limits: ["nope"] }), BadRequestError);
  const [o] = await c.feedback({ descriptors: d, outcome: "overloaded" });
  assert.equal(o.lowered, true);
});
