// usageEstimate and usage against a real `sluice serve`: spend reserved before a call, settled from its usage.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, BadRequestError } from "../dist/index.js";
import { serve } from "../support/serve.mjs";

const POLICY = `
prices:
  gpt-4o: {input: 2.50, output: 10.00, cached_input: 1.25}
limits:
  - name: tpm
    key: "team:{team}"
    capacity: 1000000
    refill: 1000000/m
    unit: tokens
  - name: budget
    key: "team:{team}"
    algorithm: quota
    period: month
    timezone: Europe/Berlin
    limit: 0.45
    unit: usd
`;
// A long prompt: $0.05 of input and at most $0.05 of output.
const LONG = { model: "gpt-4o", inputTokens: 20000, maxOutputTokens: 5000 };

let srv, c;
let n = 0;
const team = () => ({ team: `t${++n}-${process.hrtime.bigint()}` });
before(async () => {
  srv = await serve(POLICY);
  c = new Client({ url: srv.url });
});
after(async () => { await srv?.stop(); });

const budget = (d) => d.limits.find((l) => l.name === "budget");

test("5 concurrent long calls against $0.45 admit $0.40", async () => {
  const t = team();
  const ds = await Promise.all([1, 2, 3, 4, 5].map(() => new Client({ url: srv.url }).check({ descriptors: t, usageEstimate: LONG })));
  const admitted = ds.filter((d) => d.allowed);
  assert.equal(admitted.length, 4);
  assert.equal(admitted.reduce((s, d) => s + budget(d).tokenCost, 0), 400000);
});

test("usage settles spend and tokens exactly; snake_case accepted", async () => {
  const t = team();
  const d = await c.check({ descriptors: t, usage_estimate: { model: "gpt-4o", input_tokens: 20000, max_output_tokens: 5000 } });
  assert.equal(budget(d).tokenCost, 100000);
  await c.settle(d.lease, { usage: { model: "gpt-4o", inputTokens: 20000, cachedInputTokens: 10000, outputTokens: 1000 } }); // $0.0475
  const p = await c.check({ descriptors: t, cost: 0 });
  assert.equal(budget(p).tokensRemaining, 450000 - 47500);
  const tk = await c.acquire({ descriptors: t, usageEstimate: LONG, maxWait: 1 });
  await tk.settle({ usage: { model: "gpt-4o", inputTokens: 200000, outputTokens: 10000 }, release: true }); // $0.60: into debt
  assert.equal((await c.check({ descriptors: t })).allowed, false);
});

test("stats shows the usd limit's unit and the spend this instance admitted, corrected by settles", async () => {
  const of = async (name) => (await c.stats()).limits.find((l) => l.name === name);
  const before = await of("budget");
  assert.deepEqual([before.unit, before.algorithm, before.capacity], ["usd", "quota", 450000]);
  const d = await c.check({ descriptors: team(), usageEstimate: LONG }); // $0.10 reserved
  await c.settle(d.lease, { usage: { model: "gpt-4o", inputTokens: 20000, outputTokens: 1000 } }); // $0.06
  const now = await of("budget");
  assert.equal(now.spentMicroUsd, before.spentMicroUsd + 60000);
  assert.equal(now.spentUsd, (now.spentMicroUsd / 1e6).toFixed(6));
  assert.ok(now.admittedTotal >= before.admittedTotal + 1);
  const tpm = await of("tpm");
  assert.deepEqual([tpm.unit, tpm.spentMicroUsd, tpm.spentUsd], ["tokens", undefined, undefined]);
});

test("unknown model and malformed usages", async () => {
  await assert.rejects(c.check({ descriptors: team(), usageEstimate: { model: "gpt-9", inputTokens: 1 } }),
    (e) => e instanceof BadRequestError && e.code === "unknown_model");
  await assert.rejects(c.check({ descriptors: team(), usageEstimate: { inputTokens: 1 } }), TypeError);
  await assert.rejects(c.check({ descriptors: team(), usageEstimate: { model: "gpt-4o", inputTokens: -1 } }), TypeError);
  await assert.rejects(c.settle("x", { usage: { model: "gpt-4o", tokens: 1 } }), TypeError);
});
