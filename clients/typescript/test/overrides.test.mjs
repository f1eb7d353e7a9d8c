// The TypeScript client's override methods against a real `sluice serve`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, BadRequestError, UnauthorizedError } from "../dist/index.js";
import { serve, tempFile } from "../support/serve.mjs";

const POLICY = `limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: per_route
    key: "route:{route}"
    algorithm: sliding_window
    limit: 5
    window: 1m
`;
// The policy file's own override of tenant_api for tenant "pinned".
const PINNED = POLICY + "overrides:\n  - name: tenant_api\n    match: {tenant: pinned}\n    capacity: 3\n";

let srv, admin, pinned, capped, c;
let n = 0;
const tenant = () => `t${++n}-${process.hrtime.bigint()}`;

before(async () => {
  srv = await serve(POLICY);
  admin = await serve(POLICY, "--admin-token-file", tempFile("adm1n\n"), "--auth-token-file", tempFile("checks\n"));
  pinned = await serve(PINNED);
  capped = await serve(POLICY, "--max-overrides", "1");
  c = new Client({ url: srv.url });
});
after(async () => {
  for (const s of [srv, admin, pinned, capped]) await s?.stop();
});

async function rejects(p, status, code) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof BadRequestError, `${code}: ${e}`);
    assert.deepEqual([e.status, e.code], [status, code]);
    assert.match(e.message, /^sluice: /);
    return true;
  });
}

test("set, get, delete", async () => {
  const t = tenant();
  const o = await c.setOverride("tenant_api", { tenant: t }, { capacity: 500, refillPerSecond: 50, ttl: 86400, note: "trial" });
  assert.deepEqual([o.name, o.match, o.capacity, o.refillPerSecond, o.ttl, o.note, o.source], ["tenant_api", { tenant: t }, 500, 50, 86400, "trial", "api"]);
  assert.equal(o.refill, undefined, "a field not given is the policy's");
  assert.ok(o.createdAt instanceof Date && o.expiresAt instanceof Date);
  assert.equal(o.expiresAt.getTime() - o.createdAt.getTime(), 86400e3);
  const got = await c.getOverride("tenant_api", { tenant: t });
  assert.deepEqual([got?.capacity, got?.matchedTotal, got?.lastMatchedAt], [500, 0, undefined]);
  const gone = await c.deleteOverride("tenant_api", { tenant: t });
  assert.deepEqual([gone.name, gone.match], ["tenant_api", { tenant: t }]);
  assert.equal(await c.getOverride("tenant_api", { tenant: t }), undefined);
  await rejects(c.deleteOverride("tenant_api", { tenant: t }), 404, "not_found");
});

test("replacing keeps createdAt; wire names and durations", async () => {
  const t = tenant();
  const a = await c.setOverride("tenant_api", { tenant: t }, { capacity: 5 });
  const b = await c.setOverride("tenant_api", { tenant: t }, { deny: true, ttl_s: 60 });
  assert.deepEqual([b.deny, b.capacity, b.ttl, b.createdAt?.getTime()], [true, undefined, 60, a.createdAt?.getTime()]);
  const u = await c.setOverride("tenant_api", { tenant: t }, { unlimited: true, shadow: false });
  assert.deepEqual([u.unlimited, u.deny, u.shadow, u.expiresAt], [true, false, false, undefined]);
  const w = await c.setOverride("per_route", { route: t }, { limit: 50, window: 120, blockFor: "10m", shadow: true });
  assert.deepEqual([w.limit, w.window, w.blockFor, w.shadow], [50, 120, 600, true]);
  const w2 = await c.setOverride("per_route", { route: t }, { window: "1h30m", block_for: 1.5 });
  assert.deepEqual([w2.limit, w2.window, w2.blockFor], [undefined, 5400, 1.5]);
  assert.equal((await c.setOverride("tenant_api", { tenant: t }, { refill: "100/m" })).refill, "100/m");
});

test("pages and filters", async () => {
  const p = `p${tenant()}_`;
  const names = [0, 1, 2, 3, 4].map((i) => p + i).sort();
  for (const name of names) await c.setOverride("tenant_api", { tenant: name }, { capacity: 7 });
  const page = await c.listOverrides("tenant_api", { n: 2 });
  assert.equal(page.overrides.length, 2);
  assert.ok(page.nextCursor);
  const mine = [];
  for await (const o of c.iterOverrides("tenant_api", { n: 2 })) if (o.match.tenant.startsWith(p)) mine.push(o.match.tenant);
  assert.deepEqual(mine, names, "every page, in canonical-match order");
  const one = await c.listOverrides("tenant_api", { match: { tenant: names[3] } });
  assert.deepEqual([one.overrides.map((o) => o.match), one.nextCursor], [[{ tenant: names[3] }], undefined]);
  assert.deepEqual((await c.listOverrides("tenant_api", { match: { tenant: p + "*" } })).overrides, [], "a filter is exact, not a pattern");
});

test("resolve: exact, then the longer prefix, then *; the policy; a limit that does not apply", async () => {
  const t = tenant();
  await c.setOverride("tenant_api", { tenant: "*" }, { capacity: 2 });
  try {
    await c.setOverride("tenant_api", { tenant: t.slice(0, 3) + "*" }, { capacity: 3 });
    await c.setOverride("tenant_api", { tenant: t.slice(0, 5) + "*" }, { capacity: 4 });
    await c.setOverride("tenant_api", { tenant: t }, { capacity: 5 });
    const r = await c.resolve("tenant_api", { tenant: t });
    assert.deepEqual([r.source, r.applies, r.override?.match, r.effective?.capacity], ["override", true, { tenant: t }, 5]);
    assert.equal((await c.resolve("tenant_api", { tenant: t + "x" })).effective?.capacity, 4);
    assert.equal((await c.resolve("tenant_api", { tenant: t.slice(0, 4) + "-" })).effective?.capacity, 3);
    assert.equal((await c.resolve("tenant_api", { tenant: "zzz" + t })).effective?.capacity, 2);
  } finally {
    await c.deleteOverride("tenant_api", { tenant: "*" });
  }
  const r = await c.resolve("tenant_api", { tenant: "zzz" + t });
  assert.deepEqual([r.source, r.override, r.effective?.capacity], ["policy_limit", undefined, 10]);
  const none = await c.resolve("tenant_api", { route: "x" });
  assert.deepEqual([none.source, none.applies], ["none", false]);
  await c.setOverride("tenant_api", { tenant: t + "d" }, { deny: true });
  assert.equal((await c.resolve("tenant_api", { tenant: t + "d" })).effective?.deny, true);
});

test("checks follow overrides: a capacity, a deny (403 denied), unlimited", async () => {
  const t = tenant();
  await c.setOverride("tenant_api", { tenant: t }, { capacity: 2 });
  const got = [];
  for (let i = 0; i < 3; i++) got.push((await c.check({ descriptors: { tenant: t } })).allowed);
  assert.deepEqual(got, [true, true, false], "the override's capacity, not the policy's 10");
  await c.setOverride("tenant_api", { tenant: t }, { deny: true });
  const d = await c.check({ descriptors: { tenant: t } }); // (a deny is a refusal: the refused decision, not an error)
  assert.deepEqual([d.allowed, d.denied, d.limits[0].denied], [false, true, true]);
  await c.setOverride("tenant_api", { tenant: t }, { unlimited: true });
  for (let i = 0; i < 5; i++) assert.ok((await c.check({ descriptors: { tenant: t }, cost: 10 })).allowed);
  const o = await c.getOverride("tenant_api", { tenant: t });
  assert.ok(o?.lastMatchedAt instanceof Date);
  assert.ok(o.matchedTotal >= 5, String(o.matchedTotal));
});

test("every override error code", async () => {
  await rejects(c.setOverride("nope", { tenant: "a" }, { capacity: 1 }), 404, "unknown_limit");
  await rejects(c.setOverride("tenant_api", { tenant: "a" }, { limit: 5 }), 422, "kind_mismatch");
  await rejects(c.setOverride("tenant_api", { route: "a" }, { capacity: 5 }), 422, "unknown_descriptor");
  await rejects(c.setOverride("tenant_api", { tenant: "a*b" }, { capacity: 5 }), 400, "bad_request");
  await rejects(c.setOverride("tenant_api", { tenant: "a" }, { deny: true, capacity: 5 }), 400, "bad_request");
  await rejects(c.setOverride("tenant_api", { tenant: "a" }, { capacity: 0 }), 400, "bad_request");
  await rejects(c.setOverride("per_route", { route: "a" }, { window: "soon" }), 400, "bad_request");
  await rejects(c.listOverrides("nope"), 404, "unknown_limit");
  await rejects(c.resolve("nope", { tenant: "a" }), 404, "unknown_limit");
  const pc = new Client({ url: pinned.url });
  await rejects(pc.setOverride("tenant_api", { tenant: "pinned" }, { capacity: 9 }), 409, "policy_override");
  await rejects(pc.deleteOverride("tenant_api", { tenant: "pinned" }), 409, "policy_override");
  const p = await pc.getOverride("tenant_api", { tenant: "pinned" });
  assert.deepEqual([p?.source, p?.capacity], ["policy", 3]);
  const cap = new Client({ url: capped.url });
  await cap.setOverride("tenant_api", { tenant: "one" }, { capacity: 1 });
  await rejects(cap.setOverride("tenant_api", { tenant: "two" }, { capacity: 1 }), 422, "too_many_overrides");
});

test("the admin token", async () => {
  await assert.rejects(new Client({ url: admin.url }).listOverrides("tenant_api"), UnauthorizedError);
  await assert.rejects(new Client({ url: admin.url, token: "checks" }).setOverride("tenant_api", { tenant: "a" }, { capacity: 1 }), UnauthorizedError,
    "the checks' token is not the admin's");
  const o = await new Client({ url: admin.url, token: "adm1n" }).setOverride("tenant_api", { tenant: "a" }, { capacity: 1 });
  assert.equal(o.capacity, 1);
});

test("bad arguments throw TypeError before anything is sent", async () => {
  const d = new Client({ url: "http://127.0.0.1:1" }); // nothing listens: only a TypeError can come first
  for (const f of [{ capacity: "5" }, { capacity: 1.5 }, { refillPerSecond: "5" }, { ttl: 1.5 }, { ttl: 60, ttl_s: 60 }, { window: -1 },
    { window: "" }, { blockFor: 0 }, { deny: 1 }, { note: 5 }, { capacty: 5 }]) {
    await assert.rejects(d.setOverride("tenant_api", { tenant: "a" }, f), TypeError, JSON.stringify(f));
  }
  for (const m of [["tenant"], { tenant: null }, { "": "a" }]) await assert.rejects(d.setOverride("tenant_api", m), TypeError);
  for (const bad of [0, 1001, 1.5]) await assert.rejects(d.listOverrides("tenant_api", { n: bad }), TypeError);
  await assert.rejects(d.resolve("tenant_api", {}), TypeError);
  await assert.rejects(d.setOverride("", {}), TypeError);
  await assert.rejects(d.deleteOverride("", {}), TypeError);
});
