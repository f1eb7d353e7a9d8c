// The TypeScript client against a real `sluice serve`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import {
  Client, RateLimitedError, CostExceedsCapacityError, BadRequestError, NoLimitAppliesError, UnauthorizedError, ServiceUnavailableError, SluiceError,
} from "../dist/index.js";
import { serve, serveEnvoy, tempFile } from "../support/serve.mjs";

// The policy both clients' tests use.
const POLICY = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "testdata", "policy.yaml"), "utf8");

let srv, secured, storeless, envoy, c;
const freePort = () => new Promise((r) => { const s = createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => r(p)); }); });
let n = 0;
const key = () => ({ api_key: `k${++n}-${process.hrtime.bigint()}` });
const now = () => performance.now() / 1000;

before(async () => {
  srv = await serve(POLICY);
  secured = await serve(POLICY, "--auth-token-file", tempFile("s3cret\n"));
  // a store nobody answers on, failing closed: every check is a 503 store_error
  storeless = await serve(POLICY, "--store", `redis://127.0.0.1:${await freePort()}`, "--store-timeout", "200ms", "--on-store-error", "fail_closed");
  // an Envoy-config service: it decides over gRPC only
  envoy = await serveEnvoy("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 1}\n");
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
  await secured?.stop();
  await storeless?.stop();
  await envoy?.stop();
});

test("admitted and refused", async () => {
  const k = key();
  let d = await c.check({ descriptors: k, costs: { tpm: 900 } });
  assert.ok(d.allowed && d.lease);
  const by = Object.fromEntries(d.limits.map((l) => [l.name, l]));
  assert.deepEqual([by.rpm.capacity, by.rpm.tokensRemaining, by.tpm.tokensRemaining], [5, 4, 100]);
  d = await c.check({ descriptors: k, costs: { tpm: 1000 } });
  assert.equal(d.allowed, false, "a refusal is a Decision, not an exception");
  assert.ok(d.retryAfter > 0.3 && d.retryAfter <= 0.9, String(d.retryAfter));
  assert.equal(d.lease, undefined);
});

test("check waits in line", async () => {
  const k = key();
  await c.check({ descriptors: k, costs: { tpm: 1000 } });
  const t0 = now();
  const d = await c.check({ descriptors: k, costs: { tpm: 500 }, maxWait: 2 });
  assert.ok(d.allowed);
  assert.ok(now() - t0 >= 0.45);
});

test("reserve, cancel, and RateLimitedError beyond maxWait", async () => {
  const k = key();
  await c.check({ descriptors: k, costs: { tpm: 1000 } });
  const r = await c.reserve({ descriptors: k, costs: { tpm: 500 }, maxWait: 2 });
  assert.ok(r.wait > 0.4 && r.wait <= 0.51, String(r.wait));
  await r.cancel();
  const r2 = await c.reserve({ descriptors: k, costs: { tpm: 500 }, maxWait: 2 });
  assert.ok(r2.wait <= r.wait + 0.01, "a cancelled booking is returned exactly");
  await assert.rejects(c.reserve({ descriptors: k, costs: { tpm: 1000 }, maxWait: 0.2 }), (e) => e instanceof RateLimitedError && e.retryAfter > 0.2);
});

test("acquire with an AbortSignal returns the booking", async () => {
  const k = key();
  await c.check({ descriptors: k, costs: { tpm: 1000 } });
  const ctl = new AbortController();
  const p = c.acquire({ descriptors: k, costs: { tpm: 800 }, maxWait: 3, signal: ctl.signal });
  setTimeout(() => ctl.abort(), 200);
  await assert.rejects(p);
  await new Promise((r) => setTimeout(r, 500));
  const r = await c.reserve({ descriptors: k, costs: { tpm: 800 }, maxWait: 3 });
  assert.ok(r.wait <= 0.4, `the aborted booking came back: ${r.wait}`);
  await r.cancel();
});

test("settle per limit, release, ticket", async () => {
  const k = key();
  const d = await c.check({ descriptors: k, costs: { tpm: 900 } });
  await c.settle(d.lease, { actualCosts: { tpm: 100 } });
  assert.ok((await c.check({ descriptors: k, costs: { tpm: 850 } })).allowed, "the unused 800 came back");
  await assert.rejects(c.settle(d.lease, { actualCost: 1 }), (e) => e instanceof BadRequestError && e.code === "already_settled");
  const tool = { tool: "t" + key().api_key };
  const t = await c.acquire({ descriptors: tool, maxWait: 1 });
  assert.equal((await c.check({ descriptors: tool })).allowed, false, "one slot, held");
  await t.release();
  await t.release(); // idempotent
  assert.ok((await c.check({ descriptors: tool })).allowed, "released");
  const r = await c.reserve({ descriptors: { tool: tool.tool + "-c" }, maxWait: 1 });
  await r.cancel(); // a booking of a slot alone: nothing to return but the slot
  assert.ok((await c.check({ descriptors: { tool: tool.tool + "-c" } })).allowed, "a cancelled slot-only booking frees its slot");
});

test("settle with release: true settles and frees the slot in one call", async () => {
  const k = key();
  const tool = { tool: "s" + k.api_key };
  const d = await c.check({ descriptors: { ...k, ...tool }, costs: { tpm: 900 } });
  assert.equal((await c.check({ descriptors: tool })).allowed, false, "one slot, held");
  await c.settle(d.lease, { actualCosts: { tpm: 100 }, release: true });
  assert.ok((await c.check({ descriptors: tool })).allowed, "release: true frees the slot");
  assert.ok((await c.check({ descriptors: k, costs: { tpm: 850 } })).allowed, "and settles: the unused 800 came back");
  const tool2 = { tool: "u" + k.api_key };
  const t = await c.acquire({ descriptors: { ...key(), ...tool2 }, costs: { tpm: 10 }, maxWait: 1 });
  await t.settle({ actualCost: 1, release: true });
  await t.release(); // nothing more to free
  assert.ok((await c.check({ descriptors: tool2 })).allowed, "a ticket's settle with release frees its slot");
  await assert.rejects(c.settle("lease", { actualCost: 1, release: "yes" }), TypeError);
});

test("limited wraps an async function and releases on a throw", async () => {
  const tool = { tool: "t" + key().api_key };
  const f = c.limited(async (x) => { if (x < 0) throw new Error("boom"); return x * 2; }, { descriptors: tool, maxWait: 2 });
  assert.equal(await f(2), 4);
  await assert.rejects(f(-1), /boom/);
  assert.equal(await f(3), 6, "the slot was released after the throw");
});

test("pause and reportResponse are seen by another client", async () => {
  const a = new Client({ url: srv.url });
  const b = new Client({ url: srv.url });
  const k = key();
  const until = await a.pause({ descriptors: k, retryAfter: 2 });
  assert.ok(Math.abs(until - (Date.now() / 1000 + 2)) < 0.5);
  assert.equal((await b.check({ descriptors: k })).allowed, false, "paused for every client");
  assert.ok((await b.check({ descriptors: k, maxWait: 4 })).allowed);
  const k2 = key();
  assert.equal(await a.reportResponse({ status: 200, headers: { "x-ratelimit-remaining-tokens": "29000" } }, { descriptors: k2 }), undefined);
  const res = new Response("{}", { status: 429, headers: { "retry-after-ms": "1500", "Retry-After": "0" } });
  assert.equal(await a.reportResponse(res, { descriptors: k2 }), 1.5, "the longest hint, from a fetch Response");
  assert.equal((await b.check({ descriptors: k2 })).allowed, false);
  await assert.rejects(new Client({ url: srv.url }).reportResponse({ status: 429, headers: { "Retry-After": "1" } }), TypeError);
});

test("every error code mapped", async () => {
  await assert.rejects(c.check({ descriptors: key(), costs: { tpm: 5000 } }), (e) => e instanceof CostExceedsCapacityError && e.limit === "tpm");
  await assert.rejects(c.check({ descriptors: key(), costs: { nope: 1 } }), (e) => e instanceof BadRequestError && e.code === "unknown_limit");
  await assert.rejects(c.check({ descriptors: { api_kee: "k1" } }), (e) => e instanceof NoLimitAppliesError && e instanceof BadRequestError &&
    e.status === 422 && e.code === "no_limit_applies" && e.message.includes("did you mean api_key?"));
  await assert.rejects(c.settle("no-such-lease", { actualCost: 1 }), (e) => e instanceof BadRequestError && e.status === 404 && e.code === "unknown_lease");
  await assert.rejects(c.pause({ descriptors: { tool: "t" }, retryAfter: 1, limits: ["calls"] }), (e) => e instanceof BadRequestError && e.code === "bad_request");
  await assert.rejects(new Client({ url: secured.url }).check({ descriptors: key() }), UnauthorizedError);
  assert.ok((await new Client({ url: secured.url, token: "s3cret" }).check({ descriptors: key() })).allowed);
  for (const bad of [{}, null, "x"]) await assert.rejects(c.check({ descriptors: bad }), TypeError);
  await assert.rejects(c.check({ descriptors: key(), maxWait: -1 }), TypeError);
  assert.throws(() => new Client({ url: "localhost:8080" }), TypeError);
  assert.ok(new RateLimitedError("x", 1) instanceof SluiceError && new ServiceUnavailableError("x") instanceof SluiceError);
  await assert.rejects(new Client({ url: storeless.url }).check({ descriptors: key() }), (e) => e instanceof ServiceUnavailableError && e.status === 503 && e.code === "store_error");
  // 64 descriptors of 1 KiB: over --max-body (64 KiB)
  const big = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`d${i}`, "v".repeat(1024)]));
  await assert.rejects(c.check({ descriptors: big }), (e) => e instanceof BadRequestError && e.status === 413 && e.code === "body_too_large");
  // a base URL with a path no endpoint has
  await assert.rejects(new Client({ url: srv.url + "/nope" }).check({ descriptors: key() }), (e) => e instanceof BadRequestError && e.status === 404 && e.code === "not_found");
  await assert.rejects(new Client({ url: envoy.url }).check({ descriptors: key() }), (e) => e instanceof BadRequestError && !(e instanceof ServiceUnavailableError) && e.status === 404 && e.code === "no_policy");
});

test("bad arguments throw TypeError before anything is sent", async () => {
  const k = key();
  for (const o of [{ cost: 2.9 }, { cost: -1 }, { cost: "3" }, { cost: Infinity }, { costs: { tpm: NaN } }, { costs: { tpm: "12" } }, { maxWait: Infinity }, { maxWait: 1e7 }]) {
    await assert.rejects(c.check({ descriptors: k, ...o }), TypeError, JSON.stringify(o));
  }
  for (const d of [{ api_key: undefined }, { api_key: null }, { api_key: {} }]) await assert.rejects(c.check({ descriptors: d }), TypeError);
  await assert.rejects(c.pause({ descriptors: k, retryAfter: 1e6 }), TypeError);
  await assert.rejects(c.settle("lease", { actualCosts: { tpm: NaN } }), TypeError);
  await assert.rejects(c.reportResponse({ status: "429", headers: {} }, { descriptors: k }), TypeError);
  assert.throws(() => new Client({ url: srv.url, timeout: 3e6 }), TypeError);
  assert.ok((await new Client({ url: secured.url, token: "s3cret\n" }).check({ descriptors: key() })).allowed, "a token read from a file, newline and all");
});

test("a ticket's reportResponse pauses its own descriptors", async () => {
  const [ka, kb] = [key(), key()];
  const [ta, tb] = await Promise.all([c.acquire({ descriptors: ka, maxWait: 1 }), c.acquire({ descriptors: kb, maxWait: 1 })]);
  assert.equal(await ta.reportResponse({ status: 429, headers: { "retry-after": "5" } }), 5);
  await Promise.all([ta.release(), tb.release()]);
  assert.equal((await c.check({ descriptors: ka })).allowed, false, "the key that got the 429 is paused");
  assert.equal((await c.check({ descriptors: kb })).allowed, true, "the other is not");
});

test("a service that is down or silent: ServiceUnavailableError within the timeout", async () => {
  const free = await freePort();
  let t0 = now();
  await assert.rejects(new Client({ url: `http://127.0.0.1:${free}`, timeout: 1 }).check({ descriptors: key() }), (e) => e instanceof ServiceUnavailableError && e.status === undefined);
  assert.ok(now() - t0 < 2);
  const silent = createServer(() => {}); // accepts, never answers
  await new Promise((r) => silent.listen(0, "127.0.0.1", r));
  t0 = now();
  await assert.rejects(new Client({ url: `http://127.0.0.1:${silent.address().port}`, timeout: 0.5 }).check({ descriptors: key() }), ServiceUnavailableError);
  assert.ok(now() - t0 < 2, "no hang past the timeout");
  silent.close();
});
