// A worker process for the cross-language tests (run by the Go test
// cmd/sluice TestClientsShareOneBudget, with the Python worker beside it):
//
//   node worker.mjs load URL KEY START_AT_MS UNTIL_MS CONCURRENCY
//   node worker.mjs fifo URL KEY AT_MS
//
// (see clients/python/tests/worker.py: the same modes and output).
import { Client } from "../dist/index.js";

const [mode, url, key, ...rest] = process.argv.slice(2);
const c = new Client({ url, timeout: 10 });
const sleepUntil = (ms) => new Promise((r) => setTimeout(r, Math.max(ms - Date.now(), 0)));

if (mode === "fifo") {
  // A first request readies the client's code paths and connection, so
  // that the timed one leaves when it says it does.
  await c.check({ descriptors: { slow: key + "-warm" } });
  await sleepUntil(Number(rest[0]));
  const sent = Date.now();
  const d = await c.check({ descriptors: { slow: key }, maxWait: 10 });
  console.log(JSON.stringify({ allowed: d.allowed, sent_ms: sent, admitted_ms: Date.now() }));
} else {
  const [start, until, conc] = rest.map(Number);
  const counts = { admitted: 0, refused: 0, last_ms: 0 };
  await sleepUntil(start);
  await Promise.all(Array.from({ length: conc }, async () => {
    while (Date.now() < until) {
      const d = await c.check({ descriptors: { k: key } });
      if (d.allowed) {
        counts.admitted++;
        counts.last_ms = Math.max(counts.last_ms, Date.now());
      } else counts.refused++;
    }
  }));
  console.log(JSON.stringify(counts));
}
