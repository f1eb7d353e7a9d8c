"""Typed parts of the service's answers: a status's ``fair_share``
(FairShare), ``POST /v1/feedback``'s (FeedbackStatus) and ``GET
/v1/stats``' (Stats, LimitStats)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional

__all__ = ["FairShare", "FeedbackStatus", "LimitStats", "Stats"]


@dataclass(frozen=True)
class FairShare:
    """A ``fair_share`` limit's part of a status: the ``tenant`` the
    request counted for (its ``by`` descriptor's value; "" for the shared
    "other" tenant), the tenant's ``weight``, and ``refused`` when the
    tenant's share refused the request while the bucket alone would have
    admitted it (the limit is contended: others' shares are kept)."""

    tenant: str
    weight: int
    refused: bool = False

    @staticmethod
    def _of(v: Any) -> "Optional[FairShare]":
        if not isinstance(v, Mapping):
            return None
        return FairShare(tenant=str(v.get("tenant", "")), weight=int(v.get("weight", 0)), refused=bool(v.get("refused", False)))


@dataclass(frozen=True)
class FeedbackStatus:
    """One adaptive limit's answer to ``feedback``: its key's ceiling
    (``adaptive_refill_per_second``) after the feedback, between
    ``min_refill_per_second`` and the limit's ``refill_per_second``;
    ``lowered`` when this feedback lowered it."""

    name: str
    key: str
    lowered: bool
    adaptive_refill_per_second: float
    refill_per_second: float
    min_refill_per_second: float

    @staticmethod
    def _of(l: Mapping[str, Any]) -> "FeedbackStatus":
        return FeedbackStatus(name=str(l.get("name", "")), key=str(l.get("key", "")), lowered=bool(l.get("lowered", False)),
                              adaptive_refill_per_second=float(l.get("adaptive_refill_per_second", 0) or 0),
                              refill_per_second=float(l.get("refill_per_second", 0) or 0),
                              min_refill_per_second=float(l.get("min_refill_per_second", 0) or 0))


@dataclass(frozen=True)
class LimitStats:
    """One limit of ``stats()``: its configuration and what the answering
    instance counted since it started. ``unit`` is what it counts when not
    requests (``"tokens"``, ``"usd"``, ...); a ``usd`` limit's ``capacity``
    is in micro-dollars, and ``spent_micro_usd`` (``spent_usd``: dollars,
    6 decimals, as a string) the spend this instance admitted on it,
    corrected by its settles (None for other units).
    ``adaptive_refill_per_second`` is an adaptive limit's ceiling last
    read or set by this instance (None: not adaptive, or not read yet)."""

    name: str
    algorithm: str
    capacity: int
    refill_per_second: float
    shadow: bool
    admitted_total: int
    refused_total: int
    shadow_refused_total: int
    window: Optional[str] = None
    unit: Optional[str] = None
    spent_micro_usd: Optional[int] = None
    spent_usd: Optional[str] = None
    adaptive_refill_per_second: Optional[float] = None

    @staticmethod
    def _of(l: Mapping[str, Any]) -> "LimitStats":
        spent = l.get("spent_micro_usd")
        ar = l.get("adaptive_refill_per_second")
        return LimitStats(name=str(l.get("name", "")), algorithm=str(l.get("algorithm", "")), capacity=int(l.get("capacity", 0)),
                          refill_per_second=float(l.get("refill_per_second", 0) or 0), shadow=bool(l.get("shadow", False)),
                          admitted_total=int(l.get("admitted_total", 0)), refused_total=int(l.get("refused_total", 0)),
                          shadow_refused_total=int(l.get("shadow_refused_total", 0)), window=l.get("window") or None,
                          unit=l.get("unit") or None, spent_micro_usd=None if spent is None else int(spent),
                          spent_usd=l.get("spent_usd") or None, adaptive_refill_per_second=None if ar is None else float(ar))


@dataclass(frozen=True)
class Stats:
    """``GET /v1/stats``: the policy's version and each of its limits, in
    policy order (``limit(name)`` finds one)."""

    policy_version: str
    limits: List[LimitStats] = field(default_factory=list)

    def limit(self, name: str) -> Optional[LimitStats]:
        """The limit called ``name``, or None."""
        for l in self.limits:
            if l.name == name:
                return l
        return None

    @staticmethod
    def _of(body: Mapping[str, Any]) -> "Stats":
        return Stats(policy_version=str(body.get("policy_version", "")), limits=[LimitStats._of(l) for l in body.get("limits") or []])
