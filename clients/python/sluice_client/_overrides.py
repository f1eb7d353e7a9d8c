"""Overrides: per-descriptor changes of a policy limit set at run time
(``/v1/overrides``), as typed values, and the client methods that set, list,
delete and resolve them."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

__all__ = ["Override", "OverridePage", "Resolution", "EffectiveLimit"]

#: A duration: seconds (int or float), a ``timedelta``, or the service's
#: own notation (``"10m"``, ``"1h30m"``, ``"7d"``).
Duration = Union[int, float, timedelta, str]

#: The most overrides one page lists (the service's cap on ``n``).
MAX_PAGE = 1000


@dataclass(frozen=True)
class Override:
    """One override, as the service answers it. ``name`` is the policy
    limit it changes, ``match`` the descriptors it applies to (a value is
    exact, ends in ``*`` for a prefix, or is ``"*"``: any value). A
    parameter left ``None`` is the policy's. Durations (``window``,
    ``block_for``) are seconds; times are UTC ``datetime`` values
    (``expires_at`` None without a TTL). ``matched_total`` and
    ``last_matched_at`` are what the answering instance counted of it
    (listings only: 0 and None elsewhere)."""

    name: str
    match: Dict[str, str]
    capacity: Optional[int] = None
    refill_per_second: Optional[float] = None
    refill: Optional[str] = None
    limit: Optional[int] = None
    window: Optional[float] = None
    max_in_flight: Optional[int] = None
    unlimited: bool = False
    deny: bool = False
    shadow: bool = False
    block_for: Optional[float] = None
    ttl_s: Optional[int] = None
    note: str = ""
    source: str = "api"
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    matched_total: int = 0
    last_matched_at: Optional[datetime] = None

    @staticmethod
    def _of(b: Mapping[str, Any]) -> "Override":
        def opt(k: str, conv: Callable[[Any], Any]) -> Any:
            v = b.get(k)
            return None if v is None else conv(v)
        return Override(
            name=str(b.get("name", "")), match={str(k): str(v) for k, v in (b.get("match") or {}).items()},
            capacity=opt("capacity", int), refill_per_second=opt("refill_per_second", float), refill=opt("refill", str),
            limit=opt("limit", int), window=opt("window", _seconds_of), max_in_flight=opt("max_in_flight", int),
            unlimited=bool(b.get("unlimited")), deny=bool(b.get("deny")), shadow=bool(b.get("shadow")),
            block_for=opt("block_for", _seconds_of), ttl_s=opt("ttl_s", int), note=str(b.get("note") or ""),
            source=str(b.get("source") or "api"), created_at=opt("created_at", _time_of), updated_at=opt("updated_at", _time_of),
            expires_at=opt("expires_at", _time_of), matched_total=int(b.get("matched_total") or 0),
            last_matched_at=opt("last_matched_at", _time_of))


@dataclass(frozen=True)
class OverridePage:
    """A page of a limit's overrides, in the service's stable order;
    ``next_cursor`` asks for the next page (None after the last)."""

    overrides: List[Override] = field(default_factory=list)
    next_cursor: Optional[str] = None


@dataclass(frozen=True)
class EffectiveLimit:
    """A limit as it is in force for a request: the policy limit's
    parameters with an override's (as ``/v1/policy`` shows a limit).
    ``window`` is seconds (None for kinds without one)."""

    name: str
    key: str
    algorithm: str
    capacity: int = 0
    refill_per_second: Optional[float] = None
    window: Optional[float] = None
    shadow: bool = False
    unlimited: bool = False
    deny: bool = False
    block_for: Optional[float] = None

    @staticmethod
    def _of(b: Mapping[str, Any]) -> "EffectiveLimit":
        w, bf, r = b.get("window"), b.get("block_for"), b.get("refill_per_second")
        return EffectiveLimit(name=str(b.get("name", "")), key=str(b.get("key", "")), algorithm=str(b.get("algorithm", "")),
                              capacity=int(b.get("capacity") or 0), refill_per_second=None if r is None else float(r),
                              window=_seconds_of(w) if w else None, shadow=bool(b.get("shadow")),
                              unlimited=bool(b.get("unlimited")), deny=bool(b.get("deny")),
                              block_for=_seconds_of(bf) if bf else None)


@dataclass(frozen=True)
class Resolution:
    """What applies to a request of limit ``limit`` with ``descriptors``:
    ``source`` is ``"override"`` (``override`` says which), ``"policy_limit"``
    (no override matches: the policy's limit) or ``"none"`` (the limit does
    not apply to these descriptors: ``applies`` False); ``effective`` is the
    limit in force."""

    limit: str
    source: str
    applies: bool = False
    descriptors: Dict[str, str] = field(default_factory=dict)
    override: Optional[Override] = None
    effective: Optional[EffectiveLimit] = None


# -- the wire ---------------------------------------------------------------

_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h|d)")


def _seconds_of(s: Any) -> float:
    """Seconds of a duration as the service writes them ("10m", "1h30m")."""
    s = str(s)
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"sluice: {s!r} is not a duration")
    return total


def _time_of(s: Any) -> datetime:
    return datetime.fromisoformat(str(s).replace("Z", "+00:00"))


def _duration(v: Duration, what: str) -> str:
    """v in the service's notation: a string as given, a number of
    seconds or a timedelta in whole nanoseconds ("90s", "1500ms")."""
    if isinstance(v, str):
        if not v:
            raise ValueError(f"{what} is empty")
        return v
    if isinstance(v, timedelta):
        v = v.total_seconds()
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"{what} must be a positive number of seconds, a timedelta or a duration like '10m', not {v!r}")
    ns = round(v * 1e9)
    for unit, size in (("h", 3600 * 10**9), ("m", 60 * 10**9), ("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns % size == 0:
            return f"{ns // size}{unit}"
    return f"{ns}ns"


def _whole(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what} must be a whole number, not {v!r}")
    return v


def _match(m: Any, what: str = "match") -> Dict[str, str]:
    if m is None:
        return {}
    if not isinstance(m, Mapping):
        raise ValueError(f"{what} must be a mapping of descriptor names to values, not {m!r}")
    out = {}
    for k, v in m.items():
        if not isinstance(k, str) or not k or isinstance(v, bool) or not isinstance(v, (str, int)):
            raise ValueError(f"{what} {k!r}: {v!r} is not a string (nor a whole number)")
        out[k] = str(v)
    return out


def _name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be the name of a policy limit, not {name!r}")
    return name


def _set_body(name: str, match: Any, capacity: Optional[int], refill_per_second: Optional[float], refill: Optional[str],
              limit: Optional[int], window: Optional[Duration], max_in_flight: Optional[int], unlimited: bool, deny: bool,
              shadow: bool, block_for: Optional[Duration], ttl_s: Optional[int], ttl: Optional[Union[int, float, timedelta]],
              note: Optional[str]) -> Dict[str, Any]:
    b: Dict[str, Any] = {"name": _name(name), "match": _match(match)}
    for k, v in (("capacity", capacity), ("limit", limit), ("max_in_flight", max_in_flight)):
        if v is not None:
            b[k] = _whole(v, k)
    if refill_per_second is not None:
        if isinstance(refill_per_second, bool) or not isinstance(refill_per_second, (int, float)):
            raise ValueError(f"refill_per_second must be a number, not {refill_per_second!r}")
        b["refill_per_second"] = refill_per_second
    if refill is not None:
        if not isinstance(refill, str):
            raise ValueError(f"refill must be a rate like '100/m', not {refill!r}")
        b["refill"] = refill
    if window is not None:
        b["window"] = _duration(window, "window")
    if block_for is not None:
        b["block_for"] = _duration(block_for, "block_for")
    for k, on in (("unlimited", unlimited), ("deny", deny), ("shadow", shadow)):
        if not isinstance(on, bool):
            raise ValueError(f"{k} must be True or False, not {on!r}")
        if on:
            b[k] = True
    if ttl is not None:
        if ttl_s is not None:
            raise ValueError("give ttl_s or ttl, not both")
        secs = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
        if isinstance(secs, bool) or not isinstance(secs, (int, float)) or secs != int(secs):
            raise ValueError(f"ttl must be a whole number of seconds (or a timedelta of whole seconds), not {ttl!r}")
        ttl_s = int(secs)
    if ttl_s is not None:
        b["ttl_s"] = _whole(ttl_s, "ttl_s")
    if note is not None:
        if not isinstance(note, str):
            raise ValueError(f"note must be a string, not {note!r}")
        b["note"] = note
    return b


def _list_path(name: str, match: Any, cursor: Optional[str], n: Optional[int]) -> str:
    q: List[Tuple[str, str]] = [("limit", _name(name))]
    q += [("match." + k, v) for k, v in sorted(_match(match).items())]
    if cursor:
        q.append(("cursor", str(cursor)))
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PAGE:
            raise ValueError(f"n must be 1 to {MAX_PAGE}, not {n!r}")
        q.append(("n", str(n)))
    return "/v1/overrides?" + urllib.parse.urlencode(q)


def _page_of(b: Mapping[str, Any]) -> OverridePage:
    return OverridePage(overrides=[Override._of(o) for o in b.get("overrides") or []], next_cursor=b.get("next_cursor") or None)


def _resolve_path(name: str, descriptors: Any) -> str:
    d = _match(descriptors, "descriptor")
    if not d:
        raise ValueError("descriptors must be a non-empty mapping of names to values")
    q = [("limit", _name(name))] + [("descriptors." + k, v) for k, v in sorted(d.items())]
    return "/v1/overrides/resolve?" + urllib.parse.urlencode(q)


def _resolution_of(name: str, b: Mapping[str, Any]) -> Resolution:
    o, e = b.get("override"), b.get("effective")
    return Resolution(limit=str(b.get("limit") or name), source=str(b.get("source") or ""), applies=bool(b.get("applies")),
                      descriptors={str(k): str(v) for k, v in (b.get("descriptors") or {}).items()},
                      override=Override._of(o) if isinstance(o, Mapping) else None,
                      effective=EffectiveLimit._of(e) if isinstance(e, Mapping) else None)


# -- the methods ------------------------------------------------------------

class _Overrides:
    """Client's override methods (over its ``_call``)."""

    def _call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None, wait: float = 0.0,
              ok_statuses: tuple = (200,)) -> tuple:
        raise NotImplementedError

    def set_override(self, name: str, match: Mapping[str, str], *, capacity: Optional[int] = None,
                     refill_per_second: Optional[float] = None, refill: Optional[str] = None, limit: Optional[int] = None,
                     window: Optional[Duration] = None, max_in_flight: Optional[int] = None, unlimited: bool = False,
                     deny: bool = False, shadow: bool = False, block_for: Optional[Duration] = None, ttl_s: Optional[int] = None,
                     ttl: Optional[Union[int, float, timedelta]] = None, note: Optional[str] = None) -> Override:
        """Create or replace the override of limit ``name`` for the requests
        matching ``match`` (``{}``: every request the limit applies to), and
        return it as stored. Only the fields given are sent; the others are
        the policy's. The fields are the limit kind's own: ``capacity``,
        ``refill_per_second`` or ``refill`` ("100/m") for a token bucket;
        ``limit`` and ``window`` for a window (``limit`` for a quota);
        ``max_in_flight`` for a concurrency limit. Or ``deny=True`` (refuse
        every request), ``unlimited=True`` (admit every one); ``shadow=True``
        counts without refusing; ``block_for`` keeps a refused key refused
        that long. ``ttl_s`` (or ``ttl``: seconds or a timedelta, whole
        seconds) is its lifetime, after which the policy applies again.
        Durations (``window``, ``block_for``) are seconds, a timedelta, or
        the service's notation ("10m", "7d")."""
        b = _set_body(name, match, capacity, refill_per_second, refill, limit, window, max_in_flight, unlimited, deny,
                      shadow, block_for, ttl_s, ttl, note)
        _, ans = self._call("PUT", "/v1/overrides", b)
        return Override._of(ans)

    def delete_override(self, name: str, match: Mapping[str, str]) -> Override:
        """Delete the override of limit ``name`` whose match is exactly
        ``match`` and return it as it was (only its name and match when the
        answering instance had not synced it yet); raises ``BadRequest``
        (code ``not_found``, 404) when there is none."""
        _, ans = self._call("DELETE", "/v1/overrides", {"name": _name(name), "match": _match(match)})
        return Override._of(ans)

    def list_overrides(self, name: str, match: Optional[Mapping[str, str]] = None, cursor: Optional[str] = None,
                       n: Optional[int] = None) -> OverridePage:
        """One page of limit ``name``'s overrides (at most ``n``, 1 to
        1000; default the service's), those whose match has each entry of
        ``match`` exactly (``{"tier": "premium_*"}`` selects the override
        with that prefix, not those it would match); ``cursor`` is the
        previous page's ``next_cursor``."""
        _, ans = self._call("GET", _list_path(name, match, cursor, n))
        return _page_of(ans)

    def iter_overrides(self, name: str, match: Optional[Mapping[str, str]] = None, n: Optional[int] = None) -> Iterator[Override]:
        """Every override ``list_overrides`` would list, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.list_overrides(name, match, cursor, n)
            yield from page.overrides
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def get_override(self, name: str, match: Mapping[str, str]) -> Optional[Override]:
        """The override of limit ``name`` whose match is exactly ``match``,
        or None."""
        want = _match(match)
        for o in self.iter_overrides(name, want, MAX_PAGE):
            if o.match == want:
                return o
        return None

    def resolve(self, name: str, descriptors: Mapping[str, str]) -> Resolution:
        """Which override of limit ``name`` applies now to a request with
        these descriptors (the most specific live one), or whether the
        policy's limit does; it counts no decision."""
        _, ans = self._call("GET", _resolve_path(name, descriptors))
        return _resolution_of(name, ans)


class _AsyncOverrides:
    """AsyncClient's override methods: Client's, as coroutines."""

    _c: Any

    async def _run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        raise NotImplementedError

    async def set_override(self, name: str, match: Mapping[str, str], *, capacity: Optional[int] = None,
                           refill_per_second: Optional[float] = None, refill: Optional[str] = None, limit: Optional[int] = None,
                           window: Optional[Duration] = None, max_in_flight: Optional[int] = None, unlimited: bool = False,
                           deny: bool = False, shadow: bool = False, block_for: Optional[Duration] = None,
                           ttl_s: Optional[int] = None, ttl: Optional[Union[int, float, timedelta]] = None,
                           note: Optional[str] = None) -> Override:
        """Client.set_override."""
        return await self._run(self._c.set_override, name, match, capacity=capacity, refill_per_second=refill_per_second,
                               refill=refill, limit=limit, window=window, max_in_flight=max_in_flight, unlimited=unlimited,
                               deny=deny, shadow=shadow, block_for=block_for, ttl_s=ttl_s, ttl=ttl, note=note)

    async def delete_override(self, name: str, match: Mapping[str, str]) -> Override:
        """Client.delete_override."""
        return await self._run(self._c.delete_override, name, match)

    async def list_overrides(self, name: str, match: Optional[Mapping[str, str]] = None, cursor: Optional[str] = None,
                             n: Optional[int] = None) -> OverridePage:
        """Client.list_overrides."""
        return await self._run(self._c.list_overrides, name, match, cursor, n)

    async def iter_overrides(self, name: str, match: Optional[Mapping[str, str]] = None,
                             n: Optional[int] = None) -> AsyncIterator[Override]:
        """Client.iter_overrides, as an async iterator."""
        cursor: Optional[str] = None
        while True:
            page = await self.list_overrides(name, match, cursor, n)
            for o in page.overrides:
                yield o
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def get_override(self, name: str, match: Mapping[str, str]) -> Optional[Override]:
        """Client.get_override."""
        return await self._run(self._c.get_override, name, match)

    async def resolve(self, name: str, descriptors: Mapping[str, str]) -> Resolution:
        """Client.resolve."""
        return await self._run(self._c.resolve, name, descriptors)
