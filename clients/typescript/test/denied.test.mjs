// A check refused by a deny override, against a real `sluice serve`: a refusal (`denied` true), not a bad request.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, RateLimitedError } from "../dist/index.js";
import { serve } from "../support/serve.mjs";

const POLICY = `limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: login
    key: "user:{user}"
    capacity: 1
    refill_per_second: 1
    block_for: 10m
overrides:
  - name: tenant_api
    match: {tenant: blocked}
    deny: true
`;

let srv, c;
before(async () => {
  srv = await serve(POLICY);
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

test("check returns a deny's refusal, denied on the decision and the limit", async () => {
  const d = await c.check({ descriptors: { tenant: "blocked" } });
  assert.deepEqual([d.allowed, d.denied, d.lease], [false, true, undefined]);
  assert.deepEqual(d.limits.map((l) => [l.name, l.allowed, l.denied]), [["tenant_api", false, true]]);
  const ok = await c.check({ descriptors: { tenant: "acme" } });
  assert.deepEqual([ok.allowed, ok.denied, ok.limits[0].denied], [true, false, false]);
});

test("a limit with block_for marks its refusal blocked", async () => {
  const got = [];
  for (let i = 0; i < 2; i++) got.push(await c.check({ descriptors: { user: "eve" } }));
  assert.deepEqual(got.map((d) => [d.allowed, d.limits[0].blocked]), [[true, false], [false, true]]);
});

test("reserve and acquire throw RateLimitedError with denied set", async () => {
  for (const call of [(o) => c.reserve(o), (o) => c.acquire(o)]) {
    await assert.rejects(call({ descriptors: { tenant: "blocked" }, maxWait: 1 }), (e) => {
      assert.ok(e instanceof RateLimitedError, String(e));
      assert.deepEqual([e.denied, e.status, e.code, e.retryAfter], [true, 403, "denied", 0]);
      return true;
    });
  }
  const r = await c.reserve({ descriptors: { tenant: "acme" }, maxWait: 1 });
  await r.cancel();
});
