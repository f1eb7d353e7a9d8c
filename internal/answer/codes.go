// The error table: every error code sluice answers, with its HTTP status,
// its gRPC code and its meaning, defined once.

package answer

// Code is an error code: the "code" of a JSON error answer. Every code is
// one of the constants below, each with its row of the table (Table).
type Code string

// The error codes, in the order of the table.
const (
	BadBody              Code = "bad_body"
	BadJSON              Code = "bad_json"
	BadRequest           Code = "bad_request"
	UnknownLimit         Code = "unknown_limit"
	UnknownPriority      Code = "unknown_priority"
	Unauthorized         Code = "unauthorized"
	Denied               Code = "denied"
	Forbidden            Code = "forbidden"
	NoRequestDescriptors Code = "no_request_descriptors"
	NotFound             Code = "not_found"
	ReceiptDropped       Code = "receipt_dropped"
	TopOff               Code = "top_off"
	UnknownLease         Code = "unknown_lease"
	MethodNotAllowed     Code = "method_not_allowed"
	AlreadySettled       Code = "already_settled"
	PolicyOverride       Code = "policy_override"
	BodyTooLarge         Code = "body_too_large"
	CostExceedsCapacity  Code = "cost_exceeds_capacity"
	KindMismatch         Code = "kind_mismatch"
	NoLimitApplies       Code = "no_limit_applies"
	RequestIDMismatch    Code = "request_id_mismatch"
	TooManyOverrides     Code = "too_many_overrides"
	UnknownDescriptor    Code = "unknown_descriptor"
	UnknownModel         Code = "unknown_model"
	RateLimited          Code = "rate_limited"
	BadAnswer            Code = "bad_answer"
	BadReceipt           Code = "bad_receipt"
	NoPolicy             Code = "no_policy"
	Retry                Code = "retry"
	StoreError           Code = "store_error"
	StoreFull            Code = "store_full"
	StoreRefusing        Code = "store_refusing"
	StoreUnreachable     Code = "store_unreachable"
)

// gRPC codes by number (google.golang.org/grpc/codes).
const (
	GRPCInvalidArgument   = 3
	GRPCResourceExhausted = 8
	GRPCUnavailable       = 14
	GRPCInternal          = 13
)

// Entry is one row of the error table.
type Entry struct {
	Code Code
	// Status is the HTTP status answered with Code. The exceptions, named
	// in Meaning, are forward-auth's ?deny= status for rate_limited,
	// no_policy's 404 on the /v1/ paths of an Envoy-config service and
	// unknown_limit's 404 on /v1/overrides.
	Status int
	// GRPC is the gRPC status code answered with Code's errors over gRPC
	// (google.golang.org/grpc/codes numbering); 0 when none is.
	GRPC uint32
	// Meaning says when Code is answered (Markdown, as the error table of
	// docs/service.md shows it, word for word).
	Meaning string
}

// table is the error table, ordered by HTTP status, then code.
var table = [...]Entry{
	{BadBody, 400, 0, "The body could not be read."},
	{BadJSON, 400, 0, "The body is not one JSON object of known fields, each named in its exact case and given once, at any depth; the message names the field and what it wants. Nothing was charged."},
	{BadRequest, 400, GRPCInvalidArgument, "A field or parameter is missing, out of its bounds or inapplicable (missing descriptors, a negative cost or wait, more than 64 descriptors, a name outside 1 to 128 bytes, a value over 1024 bytes, a `request_id` over 256 bytes, a bad `?deny=`), or the middleware's `KeyFunc` failed; over gRPC, a request over the RateLimitService's bounds; on `/v1/overrides`, a malformed override or query (a `*` inside a `match` value, a bad number, rate or duration, `deny` or `unlimited` with parameters, an unknown field, a bad `cursor` or `n`). Nothing was charged or changed."},
	{UnknownLimit, 400, GRPCInvalidArgument, "`costs`, `actual_costs` or `/v1/pause`'s `limits` name a limit that does not apply to the descriptors (`\"limit\"` names it), or `/v1/top`'s `limit` is not in the policy; on `/v1/overrides` (answered 404 there), the override's `name` or the `limit` parameter is no limit of the policy."},
	{UnknownPriority, 400, GRPCInvalidArgument, "A `/v1/check` or reservation names a `priority` (over gRPC, a descriptor entry `priority`) that is no class of the policy's `priorities` (the message lists them). Nothing was charged."},
	{Unauthorized, 401, 0, "The bearer token is missing or wrong (with `WWW-Authenticate`); on `--auth-listen` with `--auth-listen-client-ca`, the connection has no verified client certificate."},
	{Denied, 403, 0, "Refused by an override with `deny: true` (a blocked key), whatever its limits' state: retrying is useless. Forward-auth answers 403 too; over gRPC it is a decision, `OVER_LIMIT`, not an error."},
	{Forbidden, 403, 0, "A write (`PUT`, `DELETE`) to `/v1/overrides` on a service with neither `--admin-token-file` nor `--auth-token-file`, through a listener that is not on a loopback address (the message names the flags). Nothing changed."},
	{NoRequestDescriptors, 404, 0, "`/v1/auth` on a policy without `request_descriptors`: descriptors cannot be read from a request."},
	{NotFound, 404, 0, "No endpoint at this path; on `--auth-listen`, any path but `/v1/auth` and `/healthz`; `DELETE /v1/overrides` of an override that does not exist."},
	{ReceiptDropped, 404, 0, "`/v1/settle` of a receipt id whose receipt was dropped at the `--max-receipts` cap: its cost stands as charged."},
	{TopOff, 404, 0, "`/v1/top` while the heaviest keys are not kept (`--top-keys 0`)."},
	{UnknownLease, 404, 0, "`/v1/release` or `/v1/settle` of a receipt id never issued, or whose slots and receipt have expired (older than `--lease-window`)."},
	{MethodNotAllowed, 405, 0, "The path does not take this method (`Allow` lists those it takes)."},
	{AlreadySettled, 409, 0, "`/v1/settle` of a receipt settled already (or that took no cost)."},
	{PolicyOverride, 409, 0, "`PUT` or `DELETE /v1/overrides` of an override the policy file lists (`\"source\": \"policy\"`): change it in the file (a reload replaces them). Nothing changed."},
	{BodyTooLarge, 413, 0, "The body is over `--max-body` bytes."},
	{CostExceedsCapacity, 422, GRPCInvalidArgument, "A cost above the capacity of a limit that applies (`\"limit\"` names it): it can never be admitted, retrying is useless. Nothing was charged."},
	{KindMismatch, 422, 0, "An override gives a field of another kind of limit (`limit` for a token bucket, `capacity` for a window; the message names the kinds that have it). Nothing changed."},
	{NoLimitApplies, 422, GRPCInvalidArgument, "No limit of the policy applies to the descriptors of a `/v1/check` (unless the policy says `allow_unmatched: true`); the message names the descriptors each limit needs. Nothing was charged."},
	{RequestIDMismatch, 422, 0, "The `request_id` was used by a request with other descriptors or cost. Nothing was charged."},
	{TooManyOverrides, 422, 0, "`PUT /v1/overrides` of a new override while `--max-overrides` are held (a replacement is always accepted). Nothing changed."},
	{UnknownDescriptor, 422, 0, "An override's `match` (or a listing's `match.` filter) names a descriptor its limit uses neither in its key template nor in its `when` (the message lists those it uses). Nothing changed."},
	{UnknownModel, 422, 0, "A `usage_estimate` (`/v1/check`) or `usage` (`/v1/settle`) names a model the policy has no price for, and the policy has no `default_price`, while a limit with `unit: usd` applies (`\"limit\"` names it). Nothing was charged or settled."},
	{RateLimited, 429, 0, "Refused by its limits, in front of an application (the middleware, forward-auth; with `?deny=403` or `?deny=401`, forward-auth answers that status): `retry_after_ms`, `Retry-After` and the RateLimit fields say when to retry. A refused `/v1/check` is a decision (429, `\"allowed\": false`, no code), over gRPC `OVER_LIMIT`; the clients' refusal errors carry this code."},
	{BadAnswer, 500, 0, "The answer stored for this `request_id` is unreadable."},
	{BadReceipt, 500, 0, "The receipt stored under this receipt id is unreadable."},
	{NoPolicy, 503, GRPCUnavailable, "`/readyz` with no policy loaded; 404 on the `/v1/` paths of an Envoy-config service (`--envoy-config`), which decides over gRPC only; over gRPC, `sluice ratelimit` with `CONFIG_TYPE=GRPC_XDS_SOTW` before the xDS server's first snapshot (unless `FORCE_START_WITHOUT_INITIAL_CONFIG=true`)."},
	{Retry, 503, 0, "The first request with this `request_id` has not finished: retry later."},
	{StoreError, 503, GRPCUnavailable, "The limit store failed, or answered and refused (a replica, a missing script), for a limit whose `on_store_error` does not answer without it; or the store of `request_id` answers and receipts failed, or the store of the overrides (`/v1/overrides`) did."},
	{StoreFull, 503, GRPCResourceExhausted, "The key cap (`--max-keys`) is reached with every key held by a live slot, or Redis at `maxmemory` refuses a new key; with `Retry-After` when a slot frees room. Nothing was taken."},
	{StoreRefusing, 503, 0, "`/readyz` (the body's `code`): the store answers and refuses every decision."},
	{StoreUnreachable, 503, 0, "`/readyz` (the body's `code`): the store is unreachable and a limit in force fails closed, or `--ready-requires-store`."},
}

// byCode indexes table.
var byCode = func() map[Code]*Entry {
	m := make(map[Code]*Entry, len(table))
	for i := range table {
		m[table[i].Code] = &table[i]
	}
	return m
}()

// Table returns the error table (a copy), ordered by HTTP status, then code.
func Table() []Entry { return append([]Entry(nil), table[:]...) }

// Lookup returns c's row of the table; false for a string no constant
// names.
func Lookup(c Code) (Entry, bool) {
	if e := byCode[c]; e != nil {
		return *e, true
	}
	return Entry{}, false
}

// Status is c's HTTP status (500 for a string no constant names).
func (c Code) Status() int {
	if e := byCode[c]; e != nil {
		return e.Status
	}
	return 500
}

// GRPC is c's gRPC status code: 0 when c is never answered over gRPC,
// Internal (13) for a string no constant names.
func (c Code) GRPC() uint32 {
	if e := byCode[c]; e != nil {
		return e.GRPC
	}
	return GRPCInternal
}
