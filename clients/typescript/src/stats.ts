// The typed answer of `GET /v1/stats` (Client.stats): each limit's configuration and what the answering instance counted.

/** One limit of `stats()`: its configuration and what the answering instance counted since it started. */
export interface LimitStats {
  name: string;
  algorithm: string;
  capacity: number;
  refillPerSecond: number;
  /** A window's length, an in-flight cap's lease_ttl or a quota's period ("1m0s", "month"); undefined for token buckets. */
  window?: string;
  shadow: boolean;
  admittedTotal: number;
  refusedTotal: number;
  shadowRefusedTotal: number;
  /** What the limit counts when not requests ("tokens", "usd", ...): a `usd` limit's `capacity` is in micro-dollars. */
  unit?: string;
  /** A `usd` limit's spend admitted by this instance, corrected by its settles, in micro-dollars (`spentUsd`: dollars, 6 decimals, as a string); undefined for other units. */
  spentMicroUsd?: number;
  spentUsd?: string;
  /** An adaptive limit's ceiling last read or set by this instance (undefined: not adaptive, or not read yet). */
  adaptiveRefillPerSecond?: number;
}

/** `GET /v1/stats`: the policy's version and each of its limits, in policy order. */
export interface Stats {
  policyVersion: string;
  limits: LimitStats[];
}

/** Stats from the service's answer. */
export function statsOf(body: any): Stats {
  return {
    policyVersion: String(body?.policy_version ?? ""),
    limits: (body?.limits ?? []).map((l: any): LimitStats => ({
      name: String(l.name ?? ""), algorithm: String(l.algorithm ?? ""), capacity: Number(l.capacity ?? 0),
      refillPerSecond: Number(l.refill_per_second ?? 0), shadow: Boolean(l.shadow),
      admittedTotal: Number(l.admitted_total ?? 0), refusedTotal: Number(l.refused_total ?? 0), shadowRefusedTotal: Number(l.shadow_refused_total ?? 0),
      ...(l.window ? { window: String(l.window) } : {}),
      ...(l.unit ? { unit: String(l.unit) } : {}),
      ...(l.spent_micro_usd !== undefined && l.spent_micro_usd !== null ? { spentMicroUsd: Number(l.spent_micro_usd) } : {}),
      ...(l.spent_usd ? { spentUsd: String(l.spent_usd) } : {}),
      ...(l.adaptive_refill_per_second !== undefined && l.adaptive_refill_per_second !== null ? { adaptiveRefillPerSecond: Number(l.adaptive_refill_per_second) } : {}),
    })),
  };
}
