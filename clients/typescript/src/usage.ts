// A model call's usage in a request: `usageEstimate` (check, reserve, acquire) and `usage` (settle), checked before they are sent.

/** A model call before it is made: its spend (input tokens at the input price, max output tokens at the output price) is reserved on every `unit: usd` limit, its tokens on token limits. snake_case field names are accepted too. */
export interface UsageEstimate {
  model: string;
  inputTokens?: number;
  maxOutputTokens?: number;
}

/** What a model call used, as the provider reports it (`cachedInputTokens`: the part of `inputTokens` read from the prompt cache); it settles spend and tokens exactly. snake_case field names are accepted too. */
export interface Usage {
  model: string;
  inputTokens?: number;
  outputTokens?: number;
  cachedInputTokens?: number;
}

const FIELDS: Record<string, Record<string, string>> = {
  usage_estimate: { inputTokens: "input_tokens", maxOutputTokens: "max_output_tokens" },
  usage: { inputTokens: "input_tokens", outputTokens: "output_tokens", cachedInputTokens: "cached_input_tokens" },
};

/** The body field of a usage estimate or a usage (`kind`): undefined for none, else the object the service takes (a TypeError for a malformed one). */
export function usageBody(kind: "usage_estimate" | "usage", v: unknown): Record<string, unknown> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || Array.isArray(v)) throw new TypeError(`${kind} must be an object with model and token counts`);
  const o = v as Record<string, unknown>;
  if (typeof o.model !== "string" || o.model === "") throw new TypeError(`${kind} needs a model (a non-empty string)`);
  const out: Record<string, unknown> = { model: o.model };
  const names = FIELDS[kind];
  const wire = new Set(Object.values(names));
  for (const [k, n] of Object.entries(o)) {
    if (k === "model" || n === undefined) continue;
    const f = names[k] ?? (wire.has(k) ? k : undefined);
    if (f === undefined) throw new TypeError(`${kind}: unknown field ${k} (want model, ${Object.keys(names).join(", ")})`);
    if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) throw new TypeError(`${kind}.${k} must be a whole number of at least 0, not ${String(n)}`);
    out[f] = n;
  }
  return out;
}
