/** Overrides: per-descriptor changes of a policy limit set at run time (`/v1/overrides`), as typed values, and the requests of the Client's override methods. */

/** A duration: seconds, or the service's own notation (`"10m"`, `"1h30m"`, `"7d"`). */
export type Duration = number | string;

/**
 * One override, as the service answers it. `name` is the policy limit it changes, `match` the descriptors it applies to (a
 * value is exact, ends in `*` for a prefix, or is `"*"`: any value). A parameter left undefined is the policy's. Durations
 * (`window`, `blockFor`) are seconds; `ttl` is the `ttl_s` it was set with; `expiresAt` is undefined without one.
 * `matchedTotal` and `lastMatchedAt` are what the answering instance counted of it (listings only: 0 and undefined elsewhere).
 */
export interface Override {
  name: string;
  match: Record<string, string>;
  capacity?: number;
  refillPerSecond?: number;
  refill?: string;
  limit?: number;
  window?: number;
  maxInFlight?: number;
  unlimited: boolean;
  deny: boolean;
  shadow: boolean;
  blockFor?: number;
  ttl?: number;
  note: string;
  source: string;
  createdAt?: Date;
  updatedAt?: Date;
  expiresAt?: Date;
  matchedTotal: number;
  lastMatchedAt?: Date;
}

/**
 * The fields of `setOverride`, each optional (absent: the policy's), the limit kind's own: `capacity`, `refillPerSecond` or
 * `refill` ("100/m") for a token bucket; `limit` and `window` for a window (`limit` for a quota); `maxInFlight` for a
 * concurrency limit. Or `deny` (refuse every request) or `unlimited` (admit every one); `shadow` counts without refusing;
 * `blockFor` keeps a refused key refused that long; `ttl` (whole seconds, sent as `ttl_s`) is its lifetime, after which the
 * policy applies again. The wire names (`refill_per_second`, `max_in_flight`, `block_for`, `ttl_s`) are accepted too.
 */
export interface OverrideFields {
  capacity?: number;
  refillPerSecond?: number;
  refill?: string;
  limit?: number;
  window?: Duration;
  maxInFlight?: number;
  unlimited?: boolean;
  deny?: boolean;
  shadow?: boolean;
  blockFor?: Duration;
  ttl?: number;
  note?: string;
}

/** Which of a limit's overrides `listOverrides` lists: those whose match has each entry of `match` exactly (`{ tier: "premium_*" }` selects the override with that prefix, not those it would match), `n` at most (1 to 1000; default the service's), after `cursor` (a page's `nextCursor`). */
export interface ListOverridesOptions {
  match?: Record<string, string>;
  cursor?: string;
  n?: number;
}

/** A page of a limit's overrides, in the service's stable order; `nextCursor` asks for the next page (undefined after the last). */
export interface OverridePage {
  overrides: Override[];
  nextCursor: string | undefined;
}

/** A limit as it is in force for a request: the policy limit's parameters with an override's (as `/v1/policy` shows a limit); `window` and `blockFor` are seconds. */
export interface EffectiveLimit {
  name: string;
  key: string;
  algorithm: string;
  capacity: number;
  refillPerSecond?: number;
  window?: number;
  shadow: boolean;
  unlimited: boolean;
  deny: boolean;
  blockFor?: number;
}

/**
 * What applies to a request of limit `limit` with `descriptors`: `source` is `"override"` (`override` says which),
 * `"policy_limit"` (no override matches: the policy's limit) or `"none"` (the limit does not apply to these descriptors:
 * `applies` false); `effective` is the limit in force.
 */
export interface Resolution {
  limit: string;
  source: string;
  applies: boolean;
  descriptors: Record<string, string>;
  override: Override | undefined;
  effective: EffectiveLimit | undefined;
}

/** The most overrides one page lists (the service's cap on `n`). */
export const MAX_PAGE = 1000;

const UNITS: Record<string, number> = { ns: 1e-9, us: 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600, d: 86400 };

/** Seconds of a duration as the service writes them ("10m", "1h30m"). */
export function secondsOf(s: string): number {
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h|d)/y;
  let total = 0;
  let pos = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * UNITS[m[2]];
    pos = re.lastIndex;
  }
  if (s === "" || pos !== s.length) throw new TypeError(`sluice: ${JSON.stringify(s)} is not a duration`);
  return total;
}

/** d in the service's notation: a string as given, seconds in whole nanoseconds ("90s", "1500ms"). */
function duration(d: unknown, what: string): string {
  if (typeof d === "string") {
    if (d === "") throw new TypeError(`${what} is empty`);
    return d;
  }
  if (typeof d !== "number" || !(d > 0) || !Number.isFinite(d)) throw new TypeError(`${what} must be a positive number of seconds or a duration like "10m", not ${String(d)}`);
  const ns = Math.round(d * 1e9);
  for (const [unit, size] of [["h", 3600e9], ["m", 60e9], ["s", 1e9], ["ms", 1e6], ["us", 1e3]] as const) {
    if (ns % size === 0) return `${ns / size}${unit}`;
  }
  return `${ns}ns`;
}

function whole(v: unknown, what: string): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v)) throw new TypeError(`${what} must be a whole number, not ${String(v)}`);
  return v;
}

function nameOf(name: unknown): string {
  if (typeof name !== "string" || name === "") throw new TypeError(`name must be the name of a policy limit, not ${String(name)}`);
  return name;
}

/** m as descriptor names to strings (whole numbers written as strings); undefined is {}. */
export function matchOf(m: unknown, what = "match"): Record<string, string> {
  if (m === undefined || m === null) return {};
  if (typeof m !== "object" || Array.isArray(m)) throw new TypeError(`${what} must be an object of descriptor names to values, not ${JSON.stringify(m)}`);
  return Object.fromEntries(Object.entries(m as Record<string, unknown>).map(([k, v]) => {
    if (k === "" || (typeof v !== "string" && !(typeof v === "number" && Number.isSafeInteger(v)))) throw new TypeError(`${what} ${k}: ${String(v)} is not a string (nor a whole number)`);
    return [k, String(v)];
  }));
}

// Each field of OverrideFields (and its wire name) and how it is sent.
const FIELDS: Record<string, [wire: string, conv: (v: unknown, what: string) => unknown]> = {};
const number = (v: unknown, what: string) => {
  if (typeof v !== "number" || !Number.isFinite(v)) throw new TypeError(`${what} must be a number, not ${String(v)}`);
  return v;
};
const string = (v: unknown, what: string) => {
  if (typeof v !== "string") throw new TypeError(`${what} must be a string, not ${String(v)}`);
  return v;
};
const flag = (v: unknown, what: string) => {
  if (typeof v !== "boolean") throw new TypeError(`${what} must be true or false, not ${String(v)}`);
  return v;
};
for (const [name, wire, conv] of [
  ["capacity", "capacity", whole], ["refillPerSecond", "refill_per_second", number], ["refill", "refill", string],
  ["limit", "limit", whole], ["window", "window", duration], ["maxInFlight", "max_in_flight", whole],
  ["unlimited", "unlimited", flag], ["deny", "deny", flag], ["shadow", "shadow", flag], ["blockFor", "block_for", duration],
  ["ttl", "ttl_s", whole], ["note", "note", string],
] as const) {
  FIELDS[name] = [wire, conv];
  FIELDS[wire] = [wire, conv];
}

/** The body of PUT /v1/overrides: the fields given (false flags left out). */
export function setBody(name: string, match: Record<string, string>, fields: OverrideFields = {}): Record<string, unknown> {
  const b: Record<string, unknown> = { name: nameOf(name), match: matchOf(match) };
  if (fields === null || typeof fields !== "object") throw new TypeError(`fields must be an object, not ${String(fields)}`);
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    const f = Object.prototype.hasOwnProperty.call(FIELDS, k) ? FIELDS[k] : undefined;
    if (!f) throw new TypeError(`${k} is not a field of an override (${Object.keys(FIELDS).filter((n) => !n.includes("_")).join(", ")})`);
    const [wire, conv] = f;
    if (wire in b) throw new TypeError(`${wire} given twice`);
    const x = conv(v, k);
    if (x !== false) b[wire] = x;
  }
  return b;
}

/** The path of GET /v1/overrides for limit name and o. */
export function listPath(name: string, o: ListOverridesOptions = {}): string {
  const q = new URLSearchParams({ limit: nameOf(name) });
  for (const [k, v] of Object.entries(matchOf(o?.match)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) q.append(`match.${k}`, v);
  if (o?.cursor) q.set("cursor", String(o.cursor));
  if (o?.n !== undefined) {
    if (!Number.isSafeInteger(o.n) || o.n < 1 || o.n > MAX_PAGE) throw new TypeError(`n must be 1 to ${MAX_PAGE}, not ${String(o.n)}`);
    q.set("n", String(o.n));
  }
  return `/v1/overrides?${q}`;
}

/** The path of GET /v1/overrides/resolve for limit name and descriptors d. */
export function resolvePath(name: string, d: Record<string, string>): string {
  const desc = matchOf(d, "descriptor");
  if (Object.keys(desc).length === 0) throw new TypeError("descriptors must be a non-empty object of names to values");
  const q = new URLSearchParams({ limit: nameOf(name) });
  for (const [k, v] of Object.entries(desc).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) q.append(`descriptors.${k}`, v);
  return `/v1/overrides/resolve?${q}`;
}

const opt = <T>(v: unknown, conv: (x: any) => T): T | undefined => (v === undefined || v === null ? undefined : conv(v));
const date = (s: string) => new Date(s);

/** An Override from the service's JSON. */
export function overrideOf(b: any): Override {
  return {
    name: String(b?.name ?? ""),
    match: Object.fromEntries(Object.entries(b?.match ?? {}).map(([k, v]) => [k, String(v)])),
    capacity: opt(b?.capacity, Number), refillPerSecond: opt(b?.refill_per_second, Number), refill: opt(b?.refill, String),
    limit: opt(b?.limit, Number), window: opt(b?.window, secondsOf), maxInFlight: opt(b?.max_in_flight, Number),
    unlimited: Boolean(b?.unlimited), deny: Boolean(b?.deny), shadow: Boolean(b?.shadow), blockFor: opt(b?.block_for, secondsOf),
    ttl: opt(b?.ttl_s, Number), note: String(b?.note ?? ""), source: String(b?.source ?? "api"),
    createdAt: opt(b?.created_at, date), updatedAt: opt(b?.updated_at, date), expiresAt: opt(b?.expires_at, date),
    matchedTotal: Number(b?.matched_total ?? 0), lastMatchedAt: opt(b?.last_matched_at, date),
  };
}

/** An OverridePage from GET /v1/overrides's answer. */
export function pageOf(b: any): OverridePage {
  return { overrides: (b?.overrides ?? []).map(overrideOf), nextCursor: b?.next_cursor || undefined };
}

/** A Resolution from GET /v1/overrides/resolve's answer. */
export function resolutionOf(name: string, b: any): Resolution {
  const o = b?.override;
  const e = b?.effective;
  return {
    limit: String(b?.limit || name), source: String(b?.source ?? ""), applies: Boolean(b?.applies),
    descriptors: Object.fromEntries(Object.entries(b?.descriptors ?? {}).map(([k, v]) => [k, String(v)])),
    override: o && typeof o === "object" ? overrideOf(o) : undefined,
    effective: e && typeof e === "object" ? {
      name: String(e.name ?? ""), key: String(e.key ?? ""), algorithm: String(e.algorithm ?? ""), capacity: Number(e.capacity ?? 0),
      refillPerSecond: opt(e.refill_per_second, Number), window: e.window ? secondsOf(e.window) : undefined, shadow: Boolean(e.shadow),
      unlimited: Boolean(e.unlimited), deny: Boolean(e.deny), blockFor: e.block_for ? secondsOf(e.block_for) : undefined,
    } : undefined,
  };
}

/** Whether two matches are the same (the same names, each with the same value). */
export function sameMatch(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && a[k] === b[k]);
}
