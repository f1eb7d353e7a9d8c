/**
 * Providers' rate-limit headers, read exactly as sluice's Go
 * `httplimit.ParseProviderLimits` reads them (the cases of the repository's
 * `testdata/provider_headers.json` hold for both).
 */

/** The longest reset (or retry hint) reported, in seconds (24 hours). */
export const MAX_PROVIDER_RESET = 86400;

const MAX_COUNT = 2 ** 53;
const MAX_DURATION_NS = 2n ** 63n - 1n;

/** One limit an API reports about itself in a response's headers. */
export interface ProviderLimit {
  /** `requests`, `tokens`, `input_tokens` or `output_tokens`; `""` for a retry hint (Retry-After, retry-after-ms), which holds for every dimension. */
  dimension: string;
  /** The IETF policy's name, else `""`. */
  name: string;
  /** The limit per period; -1 when not given. */
  limit: number;
  /** What is left now; -1 when not given (a retry hint has 0). */
  remaining: number;
  /** Seconds until the limit is full again (until a retry hint ends); 0 when not given; never negative, at most MAX_PROVIDER_RESET. */
  reset: number;
  /** The header family: `openai`, `anthropic`, `ietf`, `ratelimit`, `x-ratelimit`, `retry-after-ms` or `retry-after`. */
  source: string;
}

/** Response headers: a fetch `Headers`, a plain object (values string or string[]), or `[name, value]` pairs. */
export type HeadersLike = Headers | Record<string, string | string[] | undefined> | Iterable<[string, string]> | null | undefined;

class H {
  private v = new Map<string, string[]>();
  constructor(h: HeadersLike) {
    if (h == null) return;
    const add = (k: string, val: string) => {
      const key = k.toLowerCase();
      const list = this.v.get(key) ?? [];
      list.push(String(val));
      this.v.set(key, list);
    };
    if (typeof (h as Headers).forEach === "function" && typeof (h as Headers).get === "function") {
      // fetch Headers join repeated names with ", " (RateLimit lists stay lists)
      (h as Headers).forEach((val, k) => add(k, val));
    } else if (typeof (h as Iterable<[string, string]>)[Symbol.iterator] === "function") {
      for (const [k, val] of h as Iterable<[string, string]>) add(k, val);
    } else {
      for (const [k, val] of Object.entries(h as Record<string, string | string[] | undefined>)) {
        if (Array.isArray(val)) val.forEach((x) => add(k, x));
        else if (val !== undefined) add(k, val);
      }
    }
  }
  get(name: string): string {
    return this.v.get(name.toLowerCase())?.[0] ?? "";
  }
  values(name: string): string[] {
    return this.v.get(name.toLowerCase()) ?? [];
  }
}

const cap = (s: number) => Math.min(Math.max(s, 0), MAX_PROVIDER_RESET);
const allDigits = (s: string) => s.length > 0 && /^[0-9]+$/.test(s);

function nonNegInt(s: string): number | undefined {
  s = s.trim();
  if (!allDigits(s) || s.length > 15) return undefined;
  return Number(s);
}

function count(s: string): number {
  const n = nonNegInt(s);
  return n === undefined || n > MAX_COUNT ? -1 : n;
}

const UNITS: Record<string, bigint> = {
  ns: 1n, us: 1000n, "µs": 1000n, "μs": 1000n, ms: 1000000n, s: 1000000000n, m: 60000000000n, h: 3600000000000n,
};
const DUR_PART = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/y;

/** A Go-style duration ("6m0s", "1h2m3.5s") in seconds; 0 when malformed, signed or beyond a Go duration's range; capped. */
function goDuration(v: string): number {
  v = v.trim();
  if (v === "" || v[0] === "+" || v[0] === "-" || v === "0") return 0;
  // exact: nanoseconds as a fraction num/den
  let num = 0n;
  let den = 1n;
  let pos = 0;
  while (pos < v.length) {
    DUR_PART.lastIndex = pos;
    const m = DUR_PART.exec(v);
    if (!m) return 0;
    const [whole, frac = ""] = m[1].split(".");
    const d = 10n ** BigInt(frac.length);
    const n = BigInt(whole || "0") * d + BigInt(frac || "0");
    // num/den + n*unit/d
    num = num * d + n * UNITS[m[2]] * den;
    den = den * d;
    pos = DUR_PART.lastIndex;
  }
  const ns = num / den;
  if (ns > MAX_DURATION_NS) return 0;
  return cap(Number(ns) / 1e9);
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/** An RFC 3339 time as Unix seconds; undefined when malformed. */
function rfc3339(v: string): number | undefined {
  const m = RFC3339.exec(v.trim());
  if (!m) return undefined;
  const [y, mo, d, hh, mi, ss] = m.slice(1, 7).map(Number);
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || hh > 23 || mi > 59 || ss > 59) return undefined;
  let off = 0;
  if (m[8] !== "Z") {
    const oh = Number(m[8].slice(1, 3));
    const om = Number(m[8].slice(4, 6));
    if (oh > 23 || om > 59) return undefined;
    off = (m[8][0] === "+" ? 1 : -1) * (oh * 3600 + om * 60);
  }
  const t = Date.UTC(y, mo - 1, d, hh, mi, ss);
  const back = new Date(t);
  if (back.getUTCDate() !== d) return undefined; // (Feb 30th)
  return t / 1000 - off + (m[7] ? Number(m[7]) : 0);
}

const MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];

/** An HTTP-date (RFC 1123, RFC 850 or asctime) as Unix seconds; undefined when malformed. */
function httpDate(v: string): number | undefined {
  let m = /^[A-Za-z]{3}, (\d{2}) ([A-Za-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/.exec(v);
  let day: number, mon: string, year: number, hh: number, mi: number, ss: number;
  if (m) {
    [day, mon, year, hh, mi, ss] = [Number(m[1]), m[2], Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6])];
  } else if ((m = /^[A-Za-z]+, (\d{2})-([A-Za-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/.exec(v))) {
    const yy = Number(m[3]);
    [day, mon, year, hh, mi, ss] = [Number(m[1]), m[2], yy < 69 ? 2000 + yy : 1900 + yy, Number(m[4]), Number(m[5]), Number(m[6])];
  } else if ((m = /^[A-Za-z]{3} ([A-Za-z]{3}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/.exec(v))) {
    [day, mon, year, hh, mi, ss] = [Number(m[2].trim()), m[1], Number(m[6]), Number(m[3]), Number(m[4]), Number(m[5])];
  } else {
    return undefined;
  }
  const mo = MONTHS.indexOf(mon.toLowerCase());
  if (mo < 0 || day < 1 || day > 31 || hh > 23 || mi > 59 || ss > 60) return undefined;
  return Date.UTC(year, mo, day, hh, mi, ss) / 1000;
}

/** A Retry-After value (delta-seconds, or an HTTP-date measured from `now`, Unix seconds) in seconds; undefined when malformed or negative; a date in the past gives 0. Not capped. */
export function parseRetryAfter(v: string, now: number): number | undefined {
  v = v.trim();
  if (v === "") return undefined;
  if (v[0] >= "0" && v[0] <= "9") {
    if (!allDigits(v)) return undefined;
    return Math.min(Number(v), Number(MAX_DURATION_NS / 1000000000n));
  }
  const t = httpDate(v);
  return t === undefined ? undefined : Math.max(t - now, 0);
}

const FLOAT = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|infinity)$/i;

function retryAfterMS(v: string): number | undefined {
  v = v.trim();
  if (v === "" || !FLOAT.test(v)) return undefined;
  const ms = /inf/i.test(v) ? (v[0] === "-" ? -Infinity : Infinity) : Number(v);
  if (!(ms >= 0)) return undefined;
  return ms >= MAX_PROVIDER_RESET * 1000 ? MAX_PROVIDER_RESET : ms / 1000;
}

function splitOutsideQuotes(s: string, sep: string): string[] {
  const out: string[] = [];
  let inQuote = false;
  let esc = false;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (esc) esc = false;
    else if (inQuote && c === "\\") esc = true;
    else if (c === '"') inQuote = !inQuote;
    else if (!inQuote && c === sep) {
      out.push(s.slice(start, i));
      start = i + 1;
    }
  }
  out.push(s.slice(start));
  return out;
}

function bareItem(s: string): string | undefined {
  if (s === "") return undefined;
  if (s[0] === '"') {
    if (s.length < 2 || s[s.length - 1] !== '"') return undefined;
    return s.slice(1, -1).replaceAll('\\"', '"').replaceAll("\\\\", "\\");
  }
  if (/[ \t"]/.test(s)) return undefined;
  return s;
}

/** A RateLimit or RateLimit-Policy structured-field list as [policy, params] pairs; undefined when it is not a list of items. */
export function parseRateLimitField(v: string): Array<[string, Record<string, string>]> | undefined {
  const items: Array<[string, Record<string, string>]> = [];
  for (let member of splitOutsideQuotes(v, ",")) {
    member = member.trim();
    if (member === "") return undefined;
    const parts = splitOutsideQuotes(member, ";");
    const name = bareItem(parts[0].trim());
    if (name === undefined) return undefined;
    const params: Record<string, string> = {};
    for (const p of parts.slice(1)) {
      const t = p.trim();
      const i = t.indexOf("=");
      const k = i < 0 ? t : t.slice(0, i);
      let val = i < 0 ? "?1" : t.slice(i + 1);
      if (k === "" || /[ \t"]/.test(k)) return undefined;
      const u = bareItem(val);
      if (u !== undefined) val = u;
      params[k] = val;
    }
    items.push([name, params]);
  }
  return items.length > 0 ? items : undefined;
}

function ietfDimension(name: string): string {
  const n = name.toLowerCase();
  if (n.includes("input") && n.includes("token")) return "input_tokens";
  if (n.includes("output") && n.includes("token")) return "output_tokens";
  if (n.includes("token")) return "tokens";
  return "requests";
}

function push(out: ProviderLimit[], l: ProviderLimit, resetGiven: boolean): void {
  if (l.limit < 0 && l.remaining < 0 && (!resetGiven || l.reset === 0)) return;
  out.push(l);
}

function ietf(h: H): ProviderLimit[] {
  const policies = new Map<string, number>();
  for (const v of h.values("RateLimit-Policy")) {
    for (const [name, params] of parseRateLimitField(v) ?? []) {
      const q = count(params.q ?? "");
      if (q >= 0) policies.set(name, q);
    }
  }
  const out: ProviderLimit[] = [];
  const seen = new Set<string>();
  for (const v of h.values("RateLimit")) {
    for (const [name, params] of parseRateLimitField(v) ?? []) {
      const remaining = count(params.r ?? "");
      const t = nonNegInt(params.t ?? "");
      const reset = t === undefined ? 0 : cap(t);
      if (remaining >= 0 || reset > 0) {
        out.push({ dimension: ietfDimension(name), name, limit: policies.get(name) ?? -1, remaining, reset, source: "ietf" });
        seen.add(name);
      }
    }
  }
  for (const name of [...policies.keys()].sort()) {
    if (!seen.has(name)) out.push({ dimension: ietfDimension(name), name, limit: policies.get(name)!, remaining: -1, reset: 0, source: "ietf" });
  }
  return out;
}

/**
 * The rate-limit headers of any response (a 200 as well as a 429), in the families and order of sluice's Go
 * `httplimit.ParseProviderLimits`: OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (Go durations),
 * Anthropic's `anthropic-ratelimit-*` (RFC 3339 resets), the IETF `RateLimit` with `RateLimit-Policy`, `RateLimit-*`
 * and `X-RateLimit-*` (a reset of 1e9 or more is a Unix time), then `retry-after-ms` and `Retry-After`. `now` is Unix
 * seconds (default: the clock). Malformed values are skipped; it never throws.
 */
export function parseProviderLimits(headers: HeadersLike, now: number = Date.now() / 1000): ProviderLimit[] {
  const h = new H(headers);
  const out: ProviderLimit[] = [];
  for (const dim of ["requests", "tokens"]) {
    const reset = h.get(`x-ratelimit-reset-${dim}`);
    push(out, { dimension: dim, name: "", limit: count(h.get(`x-ratelimit-limit-${dim}`)), remaining: count(h.get(`x-ratelimit-remaining-${dim}`)),
      reset: goDuration(reset), source: "openai" }, reset !== "");
  }
  for (const [dim, part] of [["requests", "requests"], ["tokens", "tokens"], ["input_tokens", "input-tokens"], ["output_tokens", "output-tokens"]]) {
    const p = `anthropic-ratelimit-${part}-`;
    const reset = h.get(p + "reset");
    const t = rfc3339(reset);
    push(out, { dimension: dim, name: "", limit: count(h.get(p + "limit")), remaining: count(h.get(p + "remaining")),
      reset: t === undefined ? 0 : cap(t - now), source: "anthropic" }, reset !== "");
  }
  out.push(...ietf(h));
  for (const [prefix, source] of [["ratelimit-", "ratelimit"], ["x-ratelimit-", "x-ratelimit"]]) {
    const n = nonNegInt(h.get(prefix + "reset"));
    const reset = n === undefined ? 0 : n >= 1e9 ? cap(n - now) : cap(n);
    push(out, { dimension: "requests", name: "", limit: count(h.get(prefix + "limit")), remaining: count(h.get(prefix + "remaining")), reset, source },
      h.get(prefix + "reset") !== "");
  }
  const ms = retryAfterMS(h.get("retry-after-ms"));
  if (ms !== undefined) out.push({ dimension: "", name: "", limit: -1, remaining: 0, reset: ms, source: "retry-after-ms" });
  const ra = parseRetryAfter(h.get("retry-after"), now);
  if (ra !== undefined) out.push({ dimension: "", name: "", limit: -1, remaining: 0, reset: cap(ra), source: "retry-after" });
  return out;
}

/** How long a 429 or 503 answer asks the client to wait, in seconds: the longest of Retry-After, retry-after-ms, an exhausted IETF RateLimit policy's `t` and RateLimit-Remaining: 0 with RateLimit-Reset (as the Go `httplimit.RetryHint`); undefined when none is given. Capped at `maxHint`. */
export function retryHint(headers: HeadersLike, now: number = Date.now() / 1000, maxHint: number = MAX_PROVIDER_RESET): number | undefined {
  const h = new H(headers);
  let best: number | undefined;
  const take = (d: number) => { best = best === undefined ? d : Math.max(best, d); };
  const v = h.get("retry-after");
  if (v) {
    const d = parseRetryAfter(v, now);
    if (d !== undefined) take(d);
  }
  const ms = retryAfterMS(h.get("retry-after-ms"));
  if (ms !== undefined) take(ms);
  for (const f of h.values("RateLimit")) {
    for (const [, params] of parseRateLimitField(f) ?? []) {
      const r = nonNegInt(params.r ?? "");
      const t = nonNegInt(params.t ?? "");
      if (r === 0 && t !== undefined) take(t);
    }
  }
  if (nonNegInt(h.get("ratelimit-remaining")) === 0) {
    const t = nonNegInt(h.get("ratelimit-reset"));
    if (t !== undefined) take(t);
  }
  return best === undefined ? undefined : Math.min(Math.max(best, 0), maxHint);
}
