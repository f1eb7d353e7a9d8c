"""Errors of the sluice client, each mapped from the service's answer."""

from __future__ import annotations

from typing import Optional

__all__ = [
    "SluiceError",
    "RateLimited",
    "CostExceedsCapacity",
    "BadRequest",
    "NoLimitApplies",
    "Unauthorized",
    "ServiceUnavailable",
]


class SluiceError(Exception):
    """Any error of the client: the service's status and ``code`` when it
    answered (``status`` is None when it could not be reached)."""

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class RateLimited(SluiceError):
    """The request was refused for its limits (HTTP 429): ``retry_after``
    seconds from now it may be admitted. ``reserve`` and ``acquire`` raise
    it when the wait would exceed ``max_wait``; ``check`` returns a refused
    ``Decision`` instead. ``denied`` is True for a refusal by a deny
    override (HTTP 403 ``denied``): retrying is useless (``retry_after``
    0)."""

    def __init__(self, message: str, *, retry_after: float, status: Optional[int] = 429, code: Optional[str] = "rate_limited",
                 denied: bool = False) -> None:
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after
        self.denied = denied


class CostExceedsCapacity(SluiceError):
    """A cost is above a limit's capacity (HTTP 422 ``cost_exceeds_capacity``):
    it can never be admitted. ``limit`` names the limit when the service
    said which."""

    def __init__(self, message: str, *, limit: Optional[str] = None, status: Optional[int] = 422, code: Optional[str] = "cost_exceeds_capacity") -> None:
        super().__init__(message, status=status, code=code)
        self.limit = limit


class BadRequest(SluiceError):
    """The service refused the request as malformed or inapplicable (HTTP
    400, 404, 409, 413, 422): ``code`` says why (``bad_request``,
    ``unknown_limit``, ``unknown_lease``, ``already_settled``, ``no_policy``
    from an Envoy-config service, ...)."""


class NoLimitApplies(BadRequest):
    """No limit of the service's policy applies to the descriptors (HTTP 422
    ``no_limit_applies``): most likely a misspelt descriptor name; the
    message names the descriptors each limit needs. Nothing was charged.
    A policy with ``allow_unmatched: true`` admits such checks instead."""


class Unauthorized(SluiceError):
    """The service wants a (valid) bearer token (HTTP 401)."""


class ServiceUnavailable(SluiceError):
    """The service could not decide: it answered 503 (``store_error``,
    ``store_full``, ``retry``) or could not be reached within the
    client's timeout (``status`` None). ``retry_after`` is the service's
    hint in seconds, when it gave one."""

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None, retry_after: Optional[float] = None) -> None:
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after
