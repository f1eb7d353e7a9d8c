"""The client: one budget on a sluice service for every process."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Type, TypeVar, Union

from ._errors import BadRequest, CostExceedsCapacity, NoLimitApplies, RateLimited, ServiceUnavailable, SluiceError, Unauthorized
from ._headers import Headers, parse_provider_limits, retry_hint
from ._overrides import _Overrides
from ._stats import FairShare, FeedbackStatus, LimitStats, Stats
from ._usage import usage_fields

__all__ = ["Client", "Decision", "FairShare", "FeedbackStatus", "Limit", "LimitStats", "Reservation", "Stats", "Ticket", "trace"]

Descriptors = Mapping[str, str]
F = TypeVar("F", bound=Callable[..., Any])

#: The longest wait, pause or timeout the client accepts, in seconds (the
#: service's own pause cap: 24 hours).
MAX_SECONDS = 86400.0

# The descriptors of the acquire (or limited call) in progress in this
# thread or task: report_response's default.
_current: "contextvars.ContextVar[Optional[Dict[str, str]]]" = contextvars.ContextVar("sluice_descriptors", default=None)

# The W3C trace context (traceparent, tracestate) calls of this thread or
# task carry: trace()'s.
_trace: "contextvars.ContextVar[Optional[Dict[str, str]]]" = contextvars.ContextVar("sluice_trace", default=None)
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$")
_TRACE_FIELDS = ("traceparent", "tracestate")


@contextlib.contextmanager
def trace(traceparent: str, tracestate: Optional[str] = None) -> Any:
    """Every call to the service made inside the block (in this thread or
    asyncio task) sends this W3C trace context (the ``traceparent`` and
    ``tracestate`` headers), so that a ``sluice serve --otel`` records its
    span of the decision as a child of the caller's span::

        with sluice_client.trace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
            client.check({"api_key": "k1"})

    A ValueError for a traceparent that is not well-formed."""
    if not isinstance(traceparent, str) or not _TRACEPARENT.match(traceparent) or traceparent.startswith("ff"):
        raise ValueError(f"traceparent must be W3C's 00-<32 hex>-<16 hex>-<2 hex>, not {traceparent!r}")
    h = {"traceparent": traceparent}
    if tracestate:
        if any(c in tracestate for c in "\r\n"):
            raise ValueError("tracestate spans several lines")
        h["tracestate"] = tracestate
    token = _trace.set(h)
    try:
        yield
    finally:
        _trace.reset(token)


@dataclass(frozen=True)
class Limit:
    """One limit of a decision, as the service reports it."""

    name: str
    key: str
    capacity: int
    tokens_remaining: int
    allowed: bool
    algorithm: str = ""
    refill_per_second: float = 0.0
    token_cost: int = 0
    denied: bool = False
    #: a refusal by a limit with block_for: the key is in its penalty box
    blocked: bool = False
    #: an adaptive limit's ceiling the key was decided under (None: not adaptive)
    adaptive_refill_per_second: Optional[float] = None
    #: the key's use has reached the limit's lowest alert below 1 (policy ``alerts``)
    near_limit: bool = False
    #: a limit in shadow mode (never refuses); ``shadow_refused``: its would-be refusal
    shadow: bool = False
    shadow_refused: bool = False
    #: the request's priority class on this limit (``tokens_remaining`` is the class's)
    priority: Optional[str] = None
    #: a quota's calendar period ("day", "week", "month", "year"), None for other kinds
    period: Optional[str] = None
    #: seconds until this limit could admit the request (0 when it did)
    retry_after: float = 0.0
    #: seconds until this limit is full again (its period's end for a quota)
    reset_after: float = 0.0
    #: a ``fair_share`` limit's tenant the request counted for, its weight, and whether its share refused it
    fair_share: Optional[FairShare] = None


@dataclass(frozen=True)
class Decision:
    """A check's answer. A refusal is a Decision with ``allowed`` False (and
    ``retry_after``, seconds), not an exception. ``lease`` (the receipt id)
    settles and releases an admitted request; ``wait`` is, for a reservation, the
    seconds after which it may act. ``denied`` is True for a refusal by a deny
    override (HTTP 403 ``denied``; the limit's ``denied`` too): retrying is
    useless."""

    allowed: bool
    retry_after: float
    lease: Optional[str]
    limits: List[Limit] = field(default_factory=list)
    wait: Optional[float] = None
    denied: bool = False
    priority: Optional[str] = None  # the request's priority class, when it has one

    @property
    def near_limit(self) -> bool:
        """Whether some limit of the decision is ``near_limit`` (its key's
        use has reached the limit's lowest alert below 1)."""
        return any(l.near_limit for l in self.limits)

    @staticmethod
    def _of(body: Mapping[str, Any]) -> "Decision":
        limits = [
            Limit(name=str(l.get("name", "")), key=str(l.get("key", "")), capacity=int(l.get("capacity", 0)),
                  tokens_remaining=int(l.get("tokens_remaining", 0)), allowed=bool(l.get("allowed", False)),
                  algorithm=str(l.get("algorithm", "")), refill_per_second=float(l.get("refill_per_second", 0) or 0),
                  token_cost=int(l.get("token_cost", 0)), denied=bool(l.get("denied", False)),
                  blocked=bool(l.get("blocked", False)),
                  adaptive_refill_per_second=(float(l["adaptive_refill_per_second"]) if l.get("adaptive_refill_per_second") else None),
                  near_limit=bool(l.get("near_limit", False)), shadow=bool(l.get("shadow", False)),
                  shadow_refused=bool(l.get("shadow_refused", False)), priority=l.get("priority") or None,
                  period=l.get("period") or None, retry_after=int(l.get("retry_after_ms", 0) or 0) / 1000,
                  reset_after=int(l.get("reset_after_ms", 0) or 0) / 1000, fair_share=FairShare._of(l.get("fair_share")))
            for l in body.get("limits") or []
        ]
        wait = body.get("wait_ms")
        return Decision(allowed=bool(body.get("allowed")), retry_after=int(body.get("retry_after_ms", 0)) / 1000,
                        lease=body.get("lease") or None, limits=limits, wait=None if wait is None else int(wait) / 1000,
                        denied=body.get("code") == "denied", priority=body.get("priority") or None)


def _ms(seconds: Optional[float], what: str) -> Optional[int]:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_SECONDS:
        raise ValueError(f"{what} must be a number of seconds from 0 to {MAX_SECONDS:g}, not {seconds!r}")
    return int(-(-seconds * 1000 // 1))  # rounded up: never less than asked


def _cost(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{what} must be a whole number of at least 0, not {v!r}")
    return v


def _descriptors(descriptors: Any) -> Dict[str, str]:
    if not isinstance(descriptors, Mapping) or not descriptors:
        raise ValueError(f"descriptors must be a non-empty mapping of names to values, not {descriptors!r}")
    out = {}
    for k, v in descriptors.items():
        if not isinstance(k, str) or not k or isinstance(v, bool) or not isinstance(v, (str, int)):
            raise ValueError(f"descriptor {k!r}: {v!r} is not a string (nor a whole number)")
        out[k] = str(v)
    return out


def _body(descriptors: Descriptors, cost: Optional[int], costs: Optional[Mapping[str, int]], max_wait: Optional[float], reserve: bool, usage_estimate: Optional[Mapping[str, Any]] = None, priority: Optional[str] = None) -> Dict[str, Any]:
    b: Dict[str, Any] = {"descriptors": _descriptors(descriptors), **usage_fields("usage_estimate", usage_estimate)}
    if cost is not None:
        b["cost"] = _cost(cost, "cost")
    if costs:
        b["costs"] = {str(k): _cost(v, f"costs[{k!r}]") for k, v in costs.items()}
    mw = _ms(max_wait, "max_wait")
    if mw is not None:
        b["max_wait_ms"] = mw
    if reserve:
        b["reserve"] = True
    if priority is not None:
        if not isinstance(priority, str) or not priority:
            raise ValueError(f"priority must be a class name, not {priority!r}")
        b["priority"] = priority
    return b


# The error each code the service answers a client raises: every code of
# the service's error table (internal/answer) that can reach a client,
# checked against it by the Go tests. A code not here (a newer service's) is
# mapped by its status.
_ERRORS: Dict[str, Type[SluiceError]] = {
    "already_settled": BadRequest,
    "bad_answer": SluiceError,
    "bad_body": BadRequest,
    "bad_json": BadRequest,
    "bad_receipt": SluiceError,
    "bad_request": BadRequest,
    "body_too_large": BadRequest,
    "cost_exceeds_capacity": CostExceedsCapacity,
    "denied": RateLimited,  # (a refusal, 403: check returns the refused Decision, denied True)
    "forbidden": BadRequest,
    "kind_mismatch": BadRequest,
    "no_limit_applies": NoLimitApplies,
    "no_policy": BadRequest,  # (404 on an Envoy-config service)
    "not_found": BadRequest,
    "policy_override": BadRequest,
    "rate_limited": RateLimited,
    "receipt_dropped": BadRequest,
    "request_id_mismatch": BadRequest,
    "retry": ServiceUnavailable,
    "store_error": ServiceUnavailable,
    "store_full": ServiceUnavailable,
    "too_many_overrides": BadRequest,
    "unauthorized": Unauthorized,
    "unknown_descriptor": BadRequest,
    "unknown_model": BadRequest,
    "unknown_lease": BadRequest,
    "unknown_limit": BadRequest,
    "unknown_priority": BadRequest,
}


def _by_status(status: int) -> Type[SluiceError]:
    if status == 401:
        return Unauthorized
    if status == 429:
        return RateLimited
    if status == 503:
        return ServiceUnavailable
    if 400 <= status < 500:
        return BadRequest
    return SluiceError


def _error(status: int, body: Mapping[str, Any], raw: str) -> SluiceError:
    code = body.get("code") if isinstance(body, Mapping) else None
    msg = (body.get("error") if isinstance(body, Mapping) else None) or raw.strip() or f"HTTP {status}"
    msg = f"sluice: {msg}"
    cls = (_ERRORS.get(code) if isinstance(code, str) else None) or _by_status(status)
    if cls is RateLimited:
        return RateLimited(msg, retry_after=int(body.get("retry_after_ms", 0) or 0) / 1000, status=status, code=code or "rate_limited",
                           denied=code == "denied")
    if cls is CostExceedsCapacity:
        return CostExceedsCapacity(msg, limit=body.get("limit"), status=status, code=code)
    if cls is ServiceUnavailable:
        ra = body.get("retry_after_ms")
        return ServiceUnavailable(msg, status=status, code=code, retry_after=None if ra is None else int(ra) / 1000)
    return cls(msg, status=status, code=code)


class Client(_Overrides):
    """A blocking client of ``sluice serve`` at ``url`` (``http://host:port``).

    ``token`` is the bearer token the service wants (``--auth-token-file``;
    surrounding whitespace, such as a file's newline, is dropped);
    ``timeout`` (seconds) bounds every call: a service that does not answer
    in time (or cannot be reached) raises ``ServiceUnavailable``; a check
    that waits (``max_wait``) may take that much longer. Safe for use by
    several threads.

    ``trace_headers``, when given, is called before each call for the trace
    context to send, a mapping of which ``traceparent`` and ``tracestate``
    are sent (any case; other keys are ignored), e.g. OpenTelemetry's
    ``propagate.inject`` into a dict; ``trace()`` takes precedence."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 5.0,
                 trace_headers: Optional[Callable[[], Mapping[str, str]]] = None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http://host:port or https://..., not {url!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_SECONDS:
            raise ValueError(f"timeout must be a number of seconds above 0 and at most {MAX_SECONDS:g}, not {timeout!r}")
        if token is not None:
            token = token.strip()
            if not token or any(c in token for c in "\r\n"):
                raise ValueError("token is empty or spans several lines")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = float(timeout)
        self.trace_headers = trace_headers

    def _trace_fields(self) -> Mapping[str, str]:
        h = _trace.get()
        if h is not None:
            return h
        if self.trace_headers is None:
            return {}
        got = self.trace_headers() or {}
        out = {}
        for k, v in got.items():
            k = str(k).lower()
            if k in _TRACE_FIELDS and isinstance(v, str) and v and not any(c in v for c in "\r\n"):
                out[k] = v
        if "traceparent" not in out or not _TRACEPARENT.match(out["traceparent"]):
            return {}
        return out

    # -- the wire ---------------------------------------------------------

    def _post(self, path: str, body: Mapping[str, Any], wait: float = 0.0, ok_statuses: tuple = (200,)) -> tuple:
        return self._call("POST", path, body, wait, ok_statuses)

    def _call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None, wait: float = 0.0,
              ok_statuses: tuple = (200,)) -> tuple:
        data = None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": "application/json"}
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        for k, v in self._trace_fields().items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout + wait) as res:
                status, raw = res.status, res.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read().decode("utf-8", "replace")
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ServiceUnavailable(f"sluice: {self.url} could not be reached within {self.timeout + wait:g} s: {reason}") from e
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            parsed = {}
        if status in ok_statuses and (status != 403 or (isinstance(parsed, dict) and parsed.get("code") == "denied")):
            return status, parsed  # (403 only as a deny's refusal, for checks)
        raise _error(status, parsed if isinstance(parsed, dict) else {}, raw)

    # -- the calls --------------------------------------------------------

    def check(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
              max_wait: Optional[float] = None, usage_estimate: Optional[Mapping[str, Any]] = None, priority: Optional[str] = None) -> Decision:
        """Admit one request (``cost`` for every limit, ``costs`` per limit
        name, ``usage_estimate={"model", "input_tokens", "max_output_tokens"}``
        its spend and tokens), waiting in the limits' line up to ``max_wait``
        seconds, as priority class ``priority`` (the policy's ``priorities``;
        None: its default). A refusal is a Decision with ``allowed`` False (``denied`` True for a deny override)."""
        _, body = self._post("/v1/check", _body(descriptors, cost, costs, max_wait, False, usage_estimate, priority), wait=max_wait or 0.0, ok_statuses=(200, 429, 403))
        return Decision._of(body)

    def reserve(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
                max_wait: float, usage_estimate: Optional[Mapping[str, Any]] = None, priority: Optional[str] = None) -> "Reservation":
        """Book a place in the limits' line without holding a connection:
        the Reservation says after how many seconds (``wait``) it may act.
        Raises ``RateLimited`` when the wait would exceed ``max_wait``
        (nothing is booked), with ``denied`` True when a deny override
        refused it."""
        if max_wait is None:
            raise ValueError("reserve needs max_wait (seconds)")
        body = _body(descriptors, cost, costs, max_wait, True, usage_estimate, priority)
        status, ans = self._post("/v1/check", body, ok_statuses=(200, 429, 403))
        d = Decision._of(ans)
        if d.denied:
            raise RateLimited(f"sluice: {ans.get('error') or 'denied'}", retry_after=0.0, status=status, code="denied", denied=True)
        if not d.allowed:
            raise RateLimited(f"sluice: not admitted within max_wait ({max_wait:g} s, and the service books at most its --max-wait ahead, "
                              f"10 s by default); retry after {d.retry_after:g} s", retry_after=d.retry_after)
        return Reservation(self, d, body["descriptors"])

    def acquire(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
                max_wait: float, usage_estimate: Optional[Mapping[str, Any]] = None, priority: Optional[str] = None) -> "Ticket":
        """Book, sleep until the turn, and return a Ticket (a context
        manager releasing the request's in-flight slot on exit). A
        KeyboardInterrupt while sleeping cancels the booking."""
        r = self.reserve(descriptors, cost=cost, costs=costs, max_wait=max_wait, usage_estimate=usage_estimate, priority=priority)
        _current.set(r.descriptors)
        try:
            if r.wait > 0:
                time.sleep(r.wait)
        except BaseException:
            r.cancel()
            raise
        return Ticket(self, r.decision, r.descriptors)

    def settle(self, lease: str, actual_cost: Optional[int] = None, actual_costs: Optional[Mapping[str, int]] = None,
               release: bool = False, usage: Optional[Mapping[str, Any]] = None) -> None:
        """Replace a request's cost by what it used: ``actual_cost`` for its
        limits, ``actual_costs`` per limit name, ``usage={"model", "input_tokens",
        "output_tokens", "cached_input_tokens"}`` its spend and tokens (the others keep what
        they took). The unused part is returned exactly, an excess charged. ``release=True``
        frees the request's in-flight slots too, in the same store call."""
        if not lease:
            raise ValueError("lease is empty (a refused request has none)")
        b: Dict[str, Any] = {"lease": lease, **usage_fields("usage", usage)}
        if actual_cost is not None:
            b["actual_cost"] = _cost(actual_cost, "actual_cost")
        if actual_costs:
            b["actual_costs"] = {str(k): _cost(v, f"actual_costs[{k!r}]") for k, v in actual_costs.items()}
        if release:
            b["release"] = True
        self._post("/v1/settle", b)

    def release(self, lease: str) -> None:
        """Free a request's in-flight slots before they expire."""
        if not lease:
            raise ValueError("lease is empty (a refused request has none)")
        self._post("/v1/release", {"lease": lease})

    def pause(self, descriptors: Descriptors, retry_after: float, limits: Optional[List[str]] = None) -> float:
        """A server's retry hint for every client: the limits of
        ``descriptors`` (``limits`` names some; default every token-bucket
        limit that applies) admit nothing for ``retry_after`` seconds.
        Returns the pause's end, Unix seconds."""
        ms = _ms(retry_after, "retry_after")
        b: Dict[str, Any] = {"descriptors": _descriptors(descriptors), "retry_after_ms": max(ms or 0, 1)}
        if limits:
            b["limits"] = [str(x) for x in limits]
        _, ans = self._post("/v1/pause", b)
        return int(ans.get("paused_until_ms", 0)) / 1000

    def feedback(self, descriptors: Descriptors, outcome: str, limits: Optional[List[str]] = None) -> List[FeedbackStatus]:
        """Tell the adaptive limits (policy ``adaptive:``) of ``descriptors``
        (``limits`` names some; default every one applying) of a call's
        outcome: ``"overloaded"`` (a 429, 503 or 529 without a hint) lowers
        each key's ceiling, once per cooldown across instances; ``"ok"``
        reads them. Returns each limit's answer, a FeedbackStatus
        (``name``, ``key``, ``lowered``, ``adaptive_refill_per_second``, ...)."""
        if outcome not in ("overloaded", "ok"):
            raise ValueError(f'outcome must be "overloaded" or "ok", not {outcome!r}')
        b: Dict[str, Any] = {"descriptors": _descriptors(descriptors), "outcome": outcome}
        if limits:
            b["limits"] = [str(x) for x in limits]
        _, ans = self._post("/v1/feedback", b)
        return [FeedbackStatus._of(l) for l in ans.get("limits") or []]

    def stats(self) -> Stats:
        """``GET /v1/stats``: each limit's configuration and what this
        instance counted (admitted, refused; a ``unit: usd`` limit's spend;
        an adaptive limit's ceiling), as the live page shows it."""
        _, ans = self._call("GET", "/v1/stats")
        return Stats._of(ans)

    def report_response(self, status: int, headers: Headers, *, descriptors: Optional[Descriptors] = None,
                        limits: Optional[List[str]] = None) -> Optional[float]:
        """Read a provider's answer (its status and rate-limit headers:
        OpenAI's, Anthropic's, the IETF fields, Retry-After, retry-after-ms)
        and, when they say "wait" (a 429 or 503 with a hint, or a budget
        with nothing left and a reset), pause ``descriptors`` — by default
        those of this thread's or task's last ``acquire``/``limited`` call
        (``ticket.report_response`` names its own) — for every client.
        ``limits`` names the limits to pause (default every token-bucket
        limit applying). Returns the pause's length in seconds, None when
        nothing says wait. A 429, 503 or 529 with no hint at all is an
        overload: it is told to the adaptive limits applying (``feedback``
        ``"overloaded"``, all of them: ``limits`` names pauses), which
        lower their ceilings; it returns None (a service without
        /v1/feedback is not an error)."""
        if isinstance(status, bool) or not isinstance(status, int):
            raise ValueError(f"status must be an HTTP status code (an int), not {status!r}")
        wait = _wait_of(status, headers)
        overload = wait is None and status in (429, 503, 529) and retry_hint(headers) is None
        if wait is None and not overload:
            return None
        d = descriptors if descriptors is not None else _current.get()
        if not d:
            raise ValueError("report_response: no descriptors (pass descriptors=, or acquire first in this thread or task)")
        if overload:
            try:
                self.feedback(d, "overloaded")
            except SluiceError as e:
                if e.status != 404:
                    raise
            return None
        self.pause(d, wait, limits)
        return wait

    def limited(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
                max_wait: float = 3.0, usage_estimate: Optional[Mapping[str, Any]] = None,
                priority: Optional[str] = None) -> Callable[[F], F]:
        """A decorator: each call of the function (plain or async) first
        acquires a place (``acquire``, with the same arguments), and
        releases it when the function returns or raises."""
        def wrap(fn: F) -> F:
            if inspect.iscoroutinefunction(fn):
                from ._aclient import AsyncClient
                aclient = AsyncClient(self.url, self.token, self.timeout, self.trace_headers)

                @functools.wraps(fn)
                async def awrapper(*args: Any, **kw: Any) -> Any:
                    async with await aclient.acquire(descriptors, cost=cost, costs=costs, max_wait=max_wait,
                                                     usage_estimate=usage_estimate, priority=priority):
                        return await fn(*args, **kw)
                return awrapper  # type: ignore[return-value]

            @functools.wraps(fn)
            def wrapper(*args: Any, **kw: Any) -> Any:
                with self.acquire(descriptors, cost=cost, costs=costs, max_wait=max_wait, usage_estimate=usage_estimate, priority=priority):
                    return fn(*args, **kw)
            return wrapper  # type: ignore[return-value]
        return wrap


def _wait_of(status: int, headers: Headers) -> Optional[float]:
    wait: Optional[float] = None
    if status in (429, 503):
        wait = retry_hint(headers)
    for l in parse_provider_limits(headers):
        if l.dimension and l.remaining == 0 and l.reset > 0:
            wait = l.reset if wait is None else max(wait, l.reset)
    if wait is not None and wait <= 0:
        return None
    return wait


class Reservation:
    """A booked place in the limits' line: act after ``wait`` seconds (from
    when it was answered), or ``cancel()`` to give the booking back exactly.
    ``lease`` (the receipt id) settles and releases it."""

    def __init__(self, client: Client, decision: Decision, descriptors: Dict[str, str]) -> None:
        self._client = client
        self.decision = decision
        self.descriptors = descriptors
        self.lease: str = decision.lease or ""
        self.wait: float = decision.wait or 0.0
        self._done = False

    def cancel(self) -> None:
        """Return the booking (its tokens, exactly) and its in-flight slots."""
        if self._done:
            return
        self._done = True
        try:
            self._client.settle(self.lease, actual_cost=0)
        except BadRequest as e:
            if e.code != "already_settled":  # (a booking of in-flight slots alone took no tokens)
                raise
        self._client.release(self.lease)


class Ticket:
    """An admitted request: settle it inside the block, and its in-flight
    slot is released on exit (also on an exception)."""

    def __init__(self, client: Any, decision: Decision, descriptors: Dict[str, str]) -> None:
        self._client = client
        self.decision = decision
        self.descriptors = descriptors
        self.lease: str = decision.lease or ""
        self._released = False

    def report_response(self, status: int, headers: Headers, *, limits: Optional[List[str]] = None) -> Any:
        """Client.report_response for this request's descriptors (safe with
        concurrent requests); a coroutine for an AsyncClient's ticket."""
        return self._client.report_response(status, headers, descriptors=self.descriptors, limits=limits)

    def settle(self, actual_cost: Optional[int] = None, actual_costs: Optional[Mapping[str, int]] = None,
               release: bool = False, usage: Optional[Mapping[str, Any]] = None) -> Any:
        """Settle the request with what it used (see Client.settle; ``release=True``: exit frees nothing more)."""
        if release:
            self._released = True
        return self._client.settle(self.lease, actual_cost=actual_cost, actual_costs=actual_costs, release=release, usage=usage)

    def release(self) -> Any:
        """Free the in-flight slot (idempotent)."""
        if self._released:
            return _done() if _is_async(self._client) else None
        self._released = True
        return self._client.release(self.lease)

    def __enter__(self) -> "Ticket":
        if _is_async(self._client):
            raise TypeError("an AsyncClient's ticket is an async context manager: use `async with`")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    async def __aenter__(self) -> "Ticket":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        r = self.release()
        if inspect.isawaitable(r):
            await r


async def _done() -> None:
    return None


def _is_async(client: Any) -> bool:
    """Whether client is an AsyncClient (_aclient imports this module)."""
    from ._aclient import AsyncClient
    return isinstance(client, AsyncClient)
