/**
 * @sluice/client: one rate-limit budget, on a `sluice serve`, for every process — no runtime dependencies (Node >= 18's fetch).
 *
 * ```ts
 * import { Client } from "@sluice/client";
 * const client = new Client({ url: "http://127.0.0.1:8080" });
 * const ask = client.limited(async (prompt: string) => callTheApi(prompt), { descriptors: { api_key: "k1" }, costs: { tpm: 800 } });
 * ```
 */

import {
  BadRequestError, CostExceedsCapacityError, NoLimitAppliesError, RateLimitedError, ServiceUnavailableError, SluiceError, UnauthorizedError,
} from "./errors.js";
import { parseProviderLimits, retryHint, type HeadersLike } from "./headers.js";
import { usageBody, type Usage, type UsageEstimate } from "./usage.js";
import { statsOf, type Stats } from "./stats.js";
import {
  MAX_PAGE, listPath, matchOf, overrideOf, pageOf, resolutionOf, resolvePath, sameMatch, setBody,
  type ListOverridesOptions, type Override, type OverrideFields, type OverridePage, type Resolution,
} from "./overrides.js";

export * from "./errors.js";
export type { Usage, UsageEstimate } from "./usage.js";
export type { Stats, LimitStats } from "./stats.js";
export { parseProviderLimits, retryHint, parseRetryAfter, parseRateLimitField, MAX_PROVIDER_RESET } from "./headers.js";
export type { ProviderLimit, HeadersLike } from "./headers.js";
export type { Override, OverrideFields, ListOverridesOptions, OverridePage, Resolution, EffectiveLimit, Duration } from "./overrides.js";

/** Descriptor names to values, e.g. `{ api_key: "k1" }`. */
export type Descriptors = Record<string, string>;

/** One limit of a decision, as the service reports it. */
export interface Limit {
  name: string;
  key: string;
  algorithm: string;
  capacity: number;
  refillPerSecond: number;
  tokensRemaining: number;
  tokenCost: number;
  allowed: boolean;
  /** A deny override refused the request on this limit. */
  denied: boolean;
  /** A refusal by a limit with block_for: the key is in its penalty box (`retryAfter` counts down to its end). */
  blocked: boolean;
  /** An adaptive limit's ceiling the key was decided under (undefined: not adaptive). */
  adaptiveRefillPerSecond?: number;
  /** The key's use has reached the limit's lowest alert below 1 (policy `alerts`). */
  nearLimit: boolean;
  /** A limit in shadow mode (never refuses); `shadowRefused`: its would-be refusal. */
  shadow: boolean;
  shadowRefused: boolean;
  /** The request's priority class on this limit (`tokensRemaining` is the class's). */
  priority?: string;
  /** A quota's calendar period ("day", "week", "month", "year"); undefined for other kinds. */
  period?: string;
  /** Seconds until this limit could admit the request (0 when it did). */
  retryAfter: number;
  /** Seconds until this limit is full again (its period's end for a quota). */
  resetAfter: number;
  /** A `fair_share` limit's part: the tenant the request counted for, its weight, and whether its share refused it. */
  fairShare?: FairShare;
}

/** A `fair_share` limit's part of a status: the `tenant` the request counted for (its `by` descriptor's value; "" for the shared "other" tenant), the tenant's `weight`, and `refused` when the tenant's share refused the request while the bucket alone would have admitted it (the limit is contended: others' shares are kept). */
export interface FairShare {
  tenant: string;
  weight: number;
  refused: boolean;
}

/** One adaptive limit's answer to `feedback`. */
export interface FeedbackStatus {
  name: string;
  key: string;
  /** This feedback lowered the key's ceiling. */
  lowered: boolean;
  adaptiveRefillPerSecond: number;
  refillPerSecond: number;
  minRefillPerSecond: number;
}

/** A check's answer. A refusal is a Decision with `allowed` false (and `retryAfter`, seconds), not an exception. `lease` (the receipt id) settles and releases an admitted request; `wait` is, for a reservation, the seconds after which it may act. `denied` is true for a refusal by a deny override (HTTP 403 `denied`; the limit's `denied` too): retrying is useless. */
export interface Decision {
  allowed: boolean;
  denied: boolean;
  retryAfter: number;
  lease: string | undefined;
  limits: Limit[];
  wait: number | undefined;
  /** The request's priority class, when it has one (its own, or the policy's default_priority). */
  priority?: string;
  /** Some limit of the decision is `nearLimit` (its key's use has reached the limit's lowest alert below 1). */
  nearLimit: boolean;
}

/** What a request costs: `cost` for every limit, `costs` per limit name, and how long it may wait in line (`maxWait`, seconds). */
export interface CheckOptions {
  descriptors: Descriptors;
  cost?: number;
  costs?: Record<string, number>;
  maxWait?: number;
  /** A model call's estimate: its spend and tokens reserved on the limits that count them (also `usage_estimate`). */
  usageEstimate?: UsageEstimate;
  usage_estimate?: UsageEstimate;
  /** The request's priority class (the policy's `priorities`; undefined: its `default_priority`). An unknown class is BadRequestError `unknown_priority`. */
  priority?: string;
}

/** CheckOptions with a wait, and an AbortSignal that cancels the wait (and returns the booking). */
export interface ReserveOptions extends CheckOptions {
  maxWait: number;
  signal?: AbortSignal;
}

/** What a request used: `actualCost` for its limits, `actualCosts` per limit name (the others keep what they took). `release: true` frees the request's in-flight slots too, in the same store call (a finished request's settle and release in one). */
export interface SettleOptions {
  actualCost?: number;
  actualCosts?: Record<string, number>;
  release?: boolean;
  /** What the model call used: it settles the limits that count spend and tokens. */
  usage?: Usage;
}

/** A booked place in the limits' line: act after `wait` seconds, or `cancel()` to return the booking exactly. */
export interface Reservation {
  wait: number;
  lease: string;
  decision: Decision;
  cancel(): Promise<void>;
}

/** An admitted request: `settle` it with what it used, `release()` its in-flight slot when done (idempotent); `reportResponse` reads the provider's answer for this request's descriptors (safe with concurrent requests). */
export interface Ticket {
  lease: string;
  decision: Decision;
  descriptors: Descriptors;
  settle(opts: SettleOptions): Promise<void>;
  release(): Promise<void>;
  reportResponse(response: { status: number; headers: HeadersLike }, o?: { limits?: string[] }): Promise<number | undefined>;
}

/** The longest wait, pause or timeout the client accepts, in seconds (the service's own pause cap: 24 hours). */
export const MAX_SECONDS = 86400;

function seconds(v: number | undefined, what: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !(v >= 0 && v <= MAX_SECONDS)) throw new TypeError(`${what} must be a number of seconds from 0 to ${MAX_SECONDS}, not ${String(v)}`);
  return Math.ceil(v * 1000); // rounded up: never less than asked
}

function cost(v: unknown, what: string): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw new TypeError(`${what} must be a whole number of at least 0, not ${String(v)}`);
  return v;
}

function costMap(m: Record<string, number>, what: string): Record<string, number> {
  return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, cost(v, `${what}.${k}`)]));
}

function descriptorsOf(d: unknown): Descriptors {
  if (d === null || typeof d !== "object" || Array.isArray(d) || Object.keys(d as object).length === 0) {
    throw new TypeError(`descriptors must be a non-empty object of names to values, not ${JSON.stringify(d)}`);
  }
  return Object.fromEntries(Object.entries(d as Record<string, unknown>).map(([k, v]) => {
    if (typeof v !== "string" && !(typeof v === "number" && Number.isSafeInteger(v))) throw new TypeError(`descriptor ${k}: ${String(v)} is not a string (nor a whole number)`);
    return [k, String(v)];
  }));
}

function checkBody(o: CheckOptions, reserve: boolean): Record<string, unknown> {
  const b: Record<string, unknown> = { descriptors: descriptorsOf(o?.descriptors) };
  if (o.cost !== undefined) b.cost = cost(o.cost, "cost");
  if (o.costs && Object.keys(o.costs).length > 0) b.costs = costMap(o.costs, "costs");
  const mw = seconds(o.maxWait, "maxWait");
  if (mw !== undefined) b.max_wait_ms = mw;
  if (reserve) b.reserve = true;
  const est = usageBody("usage_estimate", o.usageEstimate ?? o.usage_estimate);
  if (est) b.usage_estimate = est;
  if (o.priority !== undefined) {
    if (typeof o.priority !== "string" || o.priority === "") throw new TypeError(`priority must be a class name, not ${JSON.stringify(o.priority)}`);
    b.priority = o.priority;
  }
  return b;
}

function decision(body: any): Decision {
  const limits: Limit[] = (body?.limits ?? []).map((l: any) => ({
    name: String(l.name ?? ""), key: String(l.key ?? ""), algorithm: String(l.algorithm ?? ""), capacity: Number(l.capacity ?? 0),
    refillPerSecond: Number(l.refill_per_second ?? 0), tokensRemaining: Number(l.tokens_remaining ?? 0), tokenCost: Number(l.token_cost ?? 0),
    allowed: Boolean(l.allowed), denied: Boolean(l.denied), blocked: Boolean(l.blocked),
    ...(l.adaptive_refill_per_second ? { adaptiveRefillPerSecond: Number(l.adaptive_refill_per_second) } : {}),
    nearLimit: Boolean(l.near_limit), shadow: Boolean(l.shadow), shadowRefused: Boolean(l.shadow_refused),
    ...(l.priority ? { priority: String(l.priority) } : {}),
    ...(l.period ? { period: String(l.period) } : {}),
    retryAfter: Number(l.retry_after_ms ?? 0) / 1000, resetAfter: Number(l.reset_after_ms ?? 0) / 1000,
    ...(l.fair_share && typeof l.fair_share === "object"
      ? { fairShare: { tenant: String(l.fair_share.tenant ?? ""), weight: Number(l.fair_share.weight ?? 0), refused: Boolean(l.fair_share.refused) } }
      : {}),
  }));
  return {
    allowed: Boolean(body?.allowed),
    denied: body?.code === "denied",
    retryAfter: Number(body?.retry_after_ms ?? 0) / 1000,
    lease: body?.lease || undefined,
    wait: body?.wait_ms === undefined ? undefined : Number(body.wait_ms) / 1000,
    ...(body?.priority ? { priority: String(body.priority) } : {}),
    limits,
    nearLimit: limits.some((l) => l.nearLimit),
  };
}

/**
 * The error each code the service answers a client throws: every code of the service's error table (internal/answer) that can
 * reach a client, checked against it by the Go tests. A code not here (a newer service's) is mapped by its status.
 */
const ERRORS: Record<string, new (...args: never[]) => SluiceError> = {
  already_settled: BadRequestError,
  bad_answer: SluiceError,
  bad_body: BadRequestError,
  bad_json: BadRequestError,
  bad_receipt: SluiceError,
  bad_request: BadRequestError,
  body_too_large: BadRequestError,
  cost_exceeds_capacity: CostExceedsCapacityError,
  denied: RateLimitedError, // (a refusal, 403: check returns the refused Decision, denied true)
  forbidden: BadRequestError,
  kind_mismatch: BadRequestError,
  no_limit_applies: NoLimitAppliesError,
  no_policy: BadRequestError, // (404 on an Envoy-config service)
  not_found: BadRequestError,
  policy_override: BadRequestError,
  rate_limited: RateLimitedError,
  receipt_dropped: BadRequestError,
  request_id_mismatch: BadRequestError,
  retry: ServiceUnavailableError,
  store_error: ServiceUnavailableError,
  store_full: ServiceUnavailableError,
  too_many_overrides: BadRequestError,
  unauthorized: UnauthorizedError,
  unknown_descriptor: BadRequestError,
  unknown_model: BadRequestError,
  unknown_lease: BadRequestError,
  unknown_limit: BadRequestError,
  unknown_priority: BadRequestError,
};

function byStatus(status: number): new (...args: never[]) => SluiceError {
  if (status === 401) return UnauthorizedError;
  if (status === 429) return RateLimitedError;
  if (status === 503) return ServiceUnavailableError;
  if (status >= 400 && status < 500) return BadRequestError;
  return SluiceError;
}

function errorOf(status: number, body: any, raw: string): SluiceError {
  const code: string | undefined = typeof body?.code === "string" ? body.code : undefined;
  const msg = "sluice: " + (body?.error || raw.trim() || `HTTP ${status}`);
  const cls = (code !== undefined && Object.prototype.hasOwnProperty.call(ERRORS, code) ? ERRORS[code] : undefined) ?? byStatus(status);
  if (cls === RateLimitedError) return new RateLimitedError(msg, Number(body?.retry_after_ms ?? 0) / 1000, { status, code, denied: code === "denied" });
  if (cls === CostExceedsCapacityError) return new CostExceedsCapacityError(msg, body?.limit, { status, code });
  if (cls === ServiceUnavailableError) return new ServiceUnavailableError(msg, { status, code, retryAfter: body?.retry_after_ms === undefined ? undefined : Number(body.retry_after_ms) / 1000 });
  return new (cls as typeof SluiceError)(msg, { status, code });
}

function sleep(s: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason ?? new Error("aborted"));
    const t = setTimeout(() => { signal?.removeEventListener("abort", onAbort); resolve(); }, s * 1000);
    const onAbort = () => { clearTimeout(t); reject(signal!.reason ?? new Error("aborted")); };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** How long a provider's answer says to wait (seconds): the 429/503 hint, or a budget at 0 with a reset; undefined when nothing says wait. */
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$/;

/** The trace fields of what `f` returns: traceparent (well-formed, W3C) and tracestate, else none. */
export function traceFields(f: (() => Record<string, string> | undefined) | undefined): Record<string, string> {
  if (!f) return {};
  const got = f() ?? {};
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(got)) {
    const name = k.toLowerCase();
    if ((name === "traceparent" || name === "tracestate") && typeof v === "string" && v && !/[\r\n]/.test(v)) out[name] = v;
  }
  if (!out.traceparent || !TRACEPARENT.test(out.traceparent) || out.traceparent.startsWith("ff")) return {};
  return out;
}

function waitOf(status: number, headers: HeadersLike): number | undefined {
  let wait = status === 429 || status === 503 ? retryHint(headers) : undefined;
  for (const l of parseProviderLimits(headers)) {
    if (l.dimension && l.remaining === 0 && l.reset > 0) wait = wait === undefined ? l.reset : Math.max(wait, l.reset);
  }
  return wait !== undefined && wait > 0 ? wait : undefined;
}

/**
 * A client of `sluice serve` at `url` (`http://host:port`). `token` is the bearer token the service wants
 * (`--auth-token-file`); `timeout` (seconds, default 5) bounds every call: a service that does not answer in time, or
 * cannot be reached, throws ServiceUnavailableError; a check that waits (`maxWait`) may take that much longer.
 * Durations are seconds.
 */
export class Client {
  readonly url: string;
  readonly token: string | undefined;
  readonly timeout: number;
  /** Called before each call for the W3C trace context to send (see the constructor). */
  readonly traceHeaders: (() => Record<string, string> | undefined) | undefined;
  private last: Descriptors | undefined;

  /**
   * `traceHeaders`, when given, is called before each call for the W3C trace context to send: of the record it returns
   * only `traceparent` and `tracestate` (any case) are sent, and nothing when the traceparent is not well-formed, so
   * that a `sluice serve --otel` records its span of the decision as a child of the caller's — e.g. OpenTelemetry's
   * `propagation.inject(context.active(), carrier)` into a fresh object, with no dependency here.
   */
  constructor(opts: { url: string; token?: string; timeout?: number; traceHeaders?: () => Record<string, string> | undefined }) {
    const { url, token, timeout = 5, traceHeaders } = opts ?? ({} as any);
    if (traceHeaders !== undefined && typeof traceHeaders !== "function") throw new TypeError("traceHeaders must be a function");
    this.traceHeaders = traceHeaders;
    if (typeof url !== "string" || !/^https?:\/\//.test(url)) throw new TypeError(`url must be http://host:port or https://..., not ${String(url)}`);
    if (typeof timeout !== "number" || !(timeout > 0 && timeout <= MAX_SECONDS)) throw new TypeError(`timeout must be a number of seconds above 0 and at most ${MAX_SECONDS}, not ${String(timeout)}`);
    const t = token?.trim();
    if (token !== undefined && (!t || /[\r\n]/.test(t))) throw new TypeError("token is empty or spans several lines");
    this.url = url.replace(/\/+$/, "");
    this.token = t;
    this.timeout = timeout;
  }

  private post(path: string, body: unknown, wait = 0, ok: number[] = [200]): Promise<any> {
    return this.request("POST", path, body, wait, ok);
  }

  private async request(method: string, path: string, body: unknown, wait = 0, ok: number[] = [200]): Promise<any> {
    const ctl = new AbortController();
    const limit = this.timeout + wait;
    const timer = setTimeout(() => ctl.abort(), limit * 1000);
    let status: number;
    let raw: string;
    try {
      const headers: Record<string, string> = body === undefined ? {} : { "Content-Type": "application/json" };
      if (this.token) headers.Authorization = `Bearer ${this.token}`;
      Object.assign(headers, traceFields(this.traceHeaders));
      const res = await fetch(this.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: ctl.signal });
      status = res.status;
      raw = await res.text();
    } catch (e) {
      const cause = (e as { cause?: { code?: string; message?: string } })?.cause;
      const why = ctl.signal.aborted ? "no answer in time" : [(e as Error)?.message, cause?.code ?? cause?.message].filter(Boolean).join(": ");
      throw new ServiceUnavailableError(`sluice: ${this.url} could not be reached within ${limit} s: ${why}`);
    } finally {
      clearTimeout(timer);
    }
    let parsed: any = {};
    try {
      parsed = raw.trim() ? JSON.parse(raw) : {};
    } catch {
      parsed = {};
    }
    if (ok.includes(status) && (status !== 403 || parsed?.code === "denied")) return parsed; // (403 only as a deny's refusal, for checks)
    throw errorOf(status, parsed, raw);
  }

  /** Admit one request, waiting in the limits' line up to `maxWait` seconds (the service holds the call). A refusal is a Decision with `allowed` false (and `denied` true when a deny override refused it). */
  async check(o: CheckOptions): Promise<Decision> {
    return decision(await this.post("/v1/check", checkBody(o, false), o.maxWait ?? 0, [200, 429, 403]));
  }

  /** Book a place in the line without holding a connection. Throws RateLimitedError when the wait would exceed `maxWait` (nothing booked), with `denied` true when a deny override refused it. An aborted `signal` returns the booking. */
  async reserve(o: ReserveOptions): Promise<Reservation> {
    if (o?.maxWait === undefined) throw new TypeError("reserve needs maxWait (seconds)");
    o.signal?.throwIfAborted();
    const body = await this.post("/v1/check", checkBody(o, true), 0, [200, 429, 403]);
    const d = decision(body);
    if (d.denied) throw new RateLimitedError(`sluice: ${body?.error || "denied"}`, 0, { status: 403, code: "denied", denied: true });
    if (!d.allowed) throw new RateLimitedError(`sluice: not admitted within maxWait (${o.maxWait} s, and the service books at most its --max-wait ahead, 10 s by default); retry after ${d.retryAfter} s`, d.retryAfter);
    let done = false;
    const r: Reservation = {
      wait: d.wait ?? 0, lease: d.lease ?? "", decision: d,
      cancel: async () => {
        if (done) return;
        done = true;
        try {
          await this.settle(r.lease, { actualCost: 0 });
        } catch (e) {
          // a booking that took no tokens (only in-flight slots) has nothing to return
          if (!(e instanceof BadRequestError && e.code === "already_settled")) throw e;
        }
        await this.release(r.lease);
      },
    };
    if (o.signal?.aborted) {
      await r.cancel();
      o.signal.throwIfAborted();
    }
    return r;
  }

  /** Book, wait the turn, and return a ticket; `release()` it when done. An aborted `signal` while waiting cancels the booking. */
  async acquire(o: ReserveOptions): Promise<Ticket> {
    const r = await this.reserve(o);
    const descriptors = descriptorsOf(o.descriptors);
    this.last = descriptors;
    try {
      if (r.wait > 0) await sleep(r.wait, o.signal);
    } catch (e) {
      await r.cancel();
      throw e;
    }
    let released = false;
    return {
      lease: r.lease, decision: r.decision, descriptors,
      settle: (s: SettleOptions) => {
        if (s?.release === true) released = true; // (freed by the settle: release() then sends nothing)
        return this.settle(r.lease, s);
      },
      reportResponse: (response, ro = {}) => this.reportResponse(response, { descriptors, limits: ro.limits }),
      release: async () => {
        if (released) return;
        released = true;
        await this.release(r.lease);
      },
    };
  }

  /** Replace a request's cost by what it used: the unused part returned exactly, an excess charged; with `release: true` its in-flight slots are freed in the same call. */
  async settle(lease: string, s: SettleOptions): Promise<void> {
    if (!lease) throw new TypeError("lease is empty (a refused request has none)");
    const b: Record<string, unknown> = { lease };
    if (s?.actualCost !== undefined) b.actual_cost = cost(s.actualCost, "actualCost");
    if (s?.actualCosts && Object.keys(s.actualCosts).length > 0) b.actual_costs = costMap(s.actualCosts, "actualCosts");
    if (s?.release !== undefined && typeof s.release !== "boolean") throw new TypeError(`release must be a boolean, not ${String(s.release)}`);
    if (s?.release) b.release = true;
    const u = usageBody("usage", s?.usage);
    if (u) b.usage = u;
    await this.post("/v1/settle", b);
  }

  /** Free a request's in-flight slots before they expire. */
  async release(lease: string): Promise<void> {
    if (!lease) throw new TypeError("lease is empty (a refused request has none)");
    await this.post("/v1/release", { lease });
  }

  /** A server's retry hint for every client: the limits of `descriptors` (`limits` names some; default every token-bucket limit that applies) admit nothing for `retryAfter` seconds. Resolves to the pause's end, Unix seconds. */
  async pause(o: { descriptors: Descriptors; retryAfter: number; limits?: string[] }): Promise<number> {
    const ms = seconds(o?.retryAfter, "retryAfter") ?? 0;
    const b: Record<string, unknown> = { descriptors: descriptorsOf(o?.descriptors), retry_after_ms: Math.max(ms, 1) };
    if (o.limits && o.limits.length > 0) b.limits = o.limits;
    const ans = await this.post("/v1/pause", b);
    return Number(ans.paused_until_ms ?? 0) / 1000;
  }

  /** Tell the adaptive limits (policy `adaptive:`) of `descriptors` (`limits` names some; default every one applying) of a call's outcome: `"overloaded"` (a 429, 503 or 529 without a hint) lowers each key's ceiling, once per cooldown across instances; `"ok"` reads them. Resolves to each limit's answer. */
  async feedback(o: { descriptors: Descriptors; outcome: "overloaded" | "ok"; limits?: string[] }): Promise<FeedbackStatus[]> {
    if (o?.outcome !== "overloaded" && o?.outcome !== "ok") throw new TypeError(`outcome must be "overloaded" or "ok", not ${String(o?.outcome)}`);
    const b: Record<string, unknown> = { descriptors: descriptorsOf(o.descriptors), outcome: o.outcome };
    if (o.limits && o.limits.length > 0) b.limits = o.limits;
    const ans = await this.post("/v1/feedback", b);
    return (ans.limits ?? []).map((l: any) => ({
      name: String(l.name ?? ""), key: String(l.key ?? ""), lowered: Boolean(l.lowered),
      adaptiveRefillPerSecond: Number(l.adaptive_refill_per_second ?? 0), refillPerSecond: Number(l.refill_per_second ?? 0),
      minRefillPerSecond: Number(l.min_refill_per_second ?? 0),
    }));
  }

  /** `GET /v1/stats`: each limit's configuration and what this instance counted (admitted, refused; a `unit: usd` limit's spend; an adaptive limit's ceiling), as the live page shows it. */
  async stats(): Promise<Stats> {
    return statsOf(await this.request("GET", "/v1/stats", undefined));
  }

  /** Wrap an async function: each call first acquires a place, and releases it when the function settles. */
  limited<A extends unknown[], R>(fn: (...args: A) => Promise<R> | R, o: CheckOptions & { maxWait?: number }): (...args: A) => Promise<R> {
    return async (...args: A) => {
      const t = await this.acquire({ ...o, maxWait: o.maxWait ?? 3 });
      try {
        return await fn(...args);
      } finally {
        await t.release();
      }
    };
  }

  /** Read a provider's answer (a fetch Response, or `{status, headers}`) and, when its rate-limit headers say wait (a 429/503 with a hint, or a budget at 0 with a reset), pause `descriptors` for every client — by default this client's last `acquire`/`limited` call's (with concurrent calls, use the ticket's own `reportResponse`). `limits` names the limits to pause (default every token-bucket limit applying). Resolves to the pause's length in seconds, undefined when nothing says wait. A 429, 503 or 529 with no hint at all is an overload: it is told to the adaptive limits applying (`feedback` `"overloaded"`, all of them: `limits` names pauses), which lower their ceilings; it resolves to undefined (a service without /v1/feedback is not an error). */
  async reportResponse(response: { status: number; headers: HeadersLike }, o: { descriptors?: Descriptors; limits?: string[] } = {}): Promise<number | undefined> {
    if (!Number.isInteger(response?.status)) throw new TypeError(`response.status must be an HTTP status code, not ${String(response?.status)}`);
    const wait = waitOf(response.status, response.headers);
    const overload = wait === undefined && [429, 503, 529].includes(response.status) && retryHint(response.headers) === undefined;
    if (wait === undefined && !overload) return undefined;
    const d = o.descriptors ?? this.last;
    if (!d) throw new TypeError("reportResponse: no descriptors (pass descriptors, or acquire first)");
    if (wait === undefined) {
      try {
        await this.feedback({ descriptors: d, outcome: "overloaded" });
      } catch (e) {
        if (!(e instanceof SluiceError && e.status === 404)) throw e;
      }
      return undefined;
    }
    await this.pause({ descriptors: d, retryAfter: wait, limits: o.limits });
    return wait;
  }
  /**
   * Create or replace the override of limit `name` for the requests matching `match` (`{}`: every request the limit applies
   * to), and resolve to it as stored. Only the fields given are sent; the others are the policy's (see OverrideFields).
   */
  async setOverride(name: string, match: Record<string, string>, fields: OverrideFields = {}): Promise<Override> {
    return overrideOf(await this.request("PUT", "/v1/overrides", setBody(name, match, fields)));
  }

  /** Delete the override of limit `name` whose match is exactly `match`, resolving to it as it was (only its name and match when the answering instance had not synced it yet); throws BadRequestError (code `not_found`, 404) when there is none. */
  async deleteOverride(name: string, match: Record<string, string>): Promise<Override> {
    return overrideOf(await this.request("DELETE", "/v1/overrides", setBody(name, match)));
  }

  /** One page of limit `name`'s overrides (see ListOverridesOptions), each with `matchedTotal` and `lastMatchedAt`. */
  async listOverrides(name: string, o: ListOverridesOptions = {}): Promise<OverridePage> {
    return pageOf(await this.request("GET", listPath(name, o), undefined));
  }

  /** Every override `listOverrides` would list, page after page. */
  async *iterOverrides(name: string, o: Omit<ListOverridesOptions, "cursor"> = {}): AsyncGenerator<Override> {
    let cursor: string | undefined;
    do {
      const page = await this.listOverrides(name, { ...o, cursor });
      yield* page.overrides;
      cursor = page.nextCursor;
    } while (cursor);
  }

  /** The override of limit `name` whose match is exactly `match`, or undefined. */
  async getOverride(name: string, match: Record<string, string>): Promise<Override | undefined> {
    const want = matchOf(match);
    for await (const o of this.iterOverrides(name, { match: want, n: MAX_PAGE })) {
      if (sameMatch(o.match, want)) return o;
    }
    return undefined;
  }

  /** Which override of limit `name` applies now to a request with these descriptors (the most specific live one), or whether the policy's limit does; it counts no decision. */
  async resolve(name: string, descriptors: Record<string, string>): Promise<Resolution> {
    return resolutionOf(name, await this.request("GET", resolvePath(name, descriptors), undefined));
  }
}
