// The provider-header cases shared with the Go and Python parsers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { parseProviderLimits, retryHint } from "../dist/index.js";

const fixture = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "testdata", "provider_headers.json"), "utf8"));
const round = (x) => Math.round(x * 1e6) / 1e6;

test("the shared fixture", () => {
  const now = Date.parse(fixture.now) / 1000;
  assert.ok(fixture.cases.length >= 10);
  for (const c of fixture.cases) {
    const got = parseProviderLimits(c.headers, now).map((l) => ({ dimension: l.dimension, name: l.name, limit: l.limit, remaining: l.remaining, reset_ms: round(l.reset * 1000), source: l.source }));
    const want = c.want.map((w) => ({ ...w, reset_ms: round(w.reset_ms) }));
    assert.deepEqual(got, want, c.name);
  }
});

test("header shapes: fetch Headers, objects, pairs", () => {
  const h = new Headers({ "X-RateLimit-Remaining-Tokens": "5" });
  assert.equal(parseProviderLimits(h)[0].remaining, 5);
  assert.equal(parseProviderLimits({ "x-ratelimit-remaining-tokens": ["5"] })[0].remaining, 5);
  assert.equal(parseProviderLimits([["x-ratelimit-remaining-tokens", "5"]])[0].remaining, 5);
  assert.deepEqual(parseProviderLimits(undefined), []);
});

test("retryHint takes the longest hint", () => {
  assert.equal(retryHint({ "retry-after-ms": "700" }), 0.7);
  assert.equal(retryHint({ "Retry-After": "1", "retry-after-ms": "2500" }), 2.5);
  assert.equal(retryHint({ "Retry-After": "2", RateLimit: '"a";r=0;t=5' }), 5);
  assert.equal(retryHint({ "RateLimit-Remaining": "0", "RateLimit-Reset": "3", "retry-after-ms": "bogus" }), 3);
  assert.equal(retryHint({ "retry-after-ms": "-1" }), undefined);
  assert.equal(retryHint({}), undefined);
});

test("garbage never throws, never a negative or absurd reset", () => {
  let seed = 7;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  const names = ["retry-after", "retry-after-ms", "RateLimit", "RateLimit-Policy", "x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset", "X-RateLimit-Reset", "x-ratelimit-remaining-requests"];
  const alphabet = '0123456789.;,="hmsµ-+eZT: abc\\';
  for (let i = 0; i < 3000; i++) {
    const h = [0, 1, 2].map(() => [names[rnd(names.length)], Array.from({ length: rnd(12) }, () => alphabet[rnd(alphabet.length)]).join("")]);
    for (const l of parseProviderLimits(h, 1_800_000_000)) assert.ok(l.reset >= 0 && l.reset <= 86400 && l.limit >= -1 && l.remaining >= -1, JSON.stringify([h, l]));
    const d = retryHint(h, 1_800_000_000);
    assert.ok(d === undefined || (d >= 0 && d <= 86400), JSON.stringify([h, d]));
  }
});
