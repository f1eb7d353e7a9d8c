/** Errors of the sluice client, each mapped from the service's answer. */

/** Any error of the client: the service's HTTP status and `code` when it answered (`status` undefined when it could not be reached). */
export class SluiceError extends Error {
  readonly status: number | undefined;
  readonly code: string | undefined;
  constructor(message: string, opts: { status?: number; code?: string } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = opts.status;
    this.code = opts.code;
  }
}

/** The request was refused for its limits (HTTP 429): it may be admitted `retryAfter` seconds from now. `reserve` and `acquire` throw it when the wait would exceed `maxWait`; `check` returns a refused Decision instead. `denied` is true for a refusal by a deny override (HTTP 403 `denied`): retrying is useless (`retryAfter` 0). */
export class RateLimitedError extends SluiceError {
  readonly retryAfter: number;
  readonly denied: boolean;
  constructor(message: string, retryAfter: number, opts: { status?: number; code?: string; denied?: boolean } = {}) {
    super(message, { status: opts.status ?? 429, code: opts.code ?? "rate_limited" });
    this.retryAfter = retryAfter;
    this.denied = opts.denied ?? false;
  }
}

/** A cost is above a limit's capacity (HTTP 422 `cost_exceeds_capacity`): it can never be admitted; `limit` names the limit when the service said which. */
export class CostExceedsCapacityError extends SluiceError {
  readonly limit: string | undefined;
  constructor(message: string, limit: string | undefined, opts: { status?: number; code?: string } = {}) {
    super(message, { status: opts.status ?? 422, code: opts.code ?? "cost_exceeds_capacity" });
    this.limit = limit;
  }
}

/** The service refused the request as malformed or inapplicable (HTTP 400, 404, 409, 413, 422): `code` says why (`bad_request`, `unknown_limit`, `unknown_lease`, `already_settled`, `no_policy` from an Envoy-config service, ...). */
export class BadRequestError extends SluiceError {}

/** No limit of the service's policy applies to the descriptors (HTTP 422 `no_limit_applies`): most likely a misspelt descriptor name; the message names the descriptors each limit needs. Nothing was charged. A policy with `allow_unmatched: true` admits such checks instead. */
export class NoLimitAppliesError extends BadRequestError {}

/** The service wants a (valid) bearer token (HTTP 401). */
export class UnauthorizedError extends SluiceError {}

/** The service could not decide: it answered 503 (`store_error`, `store_full`, `retry`), or could not be reached within the client's timeout (`status` undefined). `retryAfter` is its hint in seconds, when it gave one. */
export class ServiceUnavailableError extends SluiceError {
  readonly retryAfter: number | undefined;
  constructor(message: string, opts: { status?: number; code?: string; retryAfter?: number } = {}) {
    super(message, opts);
    this.retryAfter = opts.retryAfter;
  }
}
