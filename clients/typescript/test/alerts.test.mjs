// nearLimit against a real `sluice serve`: a limit with `alerts: [0.5, 1.0]` marks its status, and the decision, once a
// key's use reaches half of it (the lowest alert below 1).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../dist/index.js";
import { serve } from "../support/serve.mjs";

const POLICY = `
limits:
  - name: daily
    key: "user:{user}"
    algorithm: quota
    period: day
    limit: 4
    alerts: [0.5, 1.0]
  - name: burst
    key: "user:{user}"
    capacity: 100
    refill_per_second: 0.001
`;

let srv, c;
let n = 0;
const user = () => ({ user: `u${++n}-${process.hrtime.bigint()}` });
before(async () => {
  srv = await serve(POLICY);
  c = new Client({ url: srv.url });
});
after(async () => { await srv?.stop(); });

const by = (d, name) => d.limits.find((l) => l.name === name);

test("near_limit from the 0.5 alert on, per limit and for the decision", async () => {
  const u = user();
  const got = [];
  let d;
  for (let i = 0; i < 5; i++) {
    d = await c.check({ descriptors: u });
    got.push([d.allowed, d.nearLimit, by(d, "daily").nearLimit, by(d, "burst").nearLimit]);
  }
  assert.deepEqual(got, [
    [true, false, false, false], // 1 of 4 used
    [true, true, true, false], //   2 of 4: the 0.5 alert reached
    [true, true, true, false],
    [true, true, true, false], //   4 of 4 (the 1.0 alert: still near)
    [false, true, true, false], //  refused, and still near
  ]);
  assert.equal(by(d, "daily").period, "day");
  assert.ok(by(d, "daily").retryAfter > 0 && by(d, "daily").resetAfter > 0, JSON.stringify(by(d, "daily")));
});

test("a cost crosses at once", async () => {
  const d = await c.check({ descriptors: user(), costs: { daily: 3 } });
  assert.equal(d.allowed, true);
  assert.equal(d.nearLimit, true);
  assert.deepEqual(d.limits.filter((l) => l.nearLimit).map((l) => l.name), ["daily"]);
});
