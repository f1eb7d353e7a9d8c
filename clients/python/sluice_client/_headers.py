"""Providers' rate-limit headers, read exactly as sluice's Go
``httplimit.ParseProviderLimits`` reads them (the cases of the repository's
``testdata/provider_headers.json`` hold for both)."""

from __future__ import annotations

import datetime as _dt
import email.utils
import math
import re
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

__all__ = ["ProviderLimit", "MAX_PROVIDER_RESET", "parse_provider_limits", "retry_hint", "Headers"]

#: The longest reset (or retry hint) reported, in seconds (24 hours).
MAX_PROVIDER_RESET = 86400.0

_MAX_COUNT = 1 << 53
_MAX_DURATION_NS = (1 << 63) - 1

#: Response headers: a mapping (``dict``, ``http.client.HTTPMessage``,
#: ``email.message.Message``) or an iterable of ``(name, value)`` pairs.
Headers = Union[Mapping[str, str], Iterable[Tuple[str, str]], Any]


@dataclass(frozen=True)
class ProviderLimit:
    """One limit an API reports about itself in a response's headers.

    ``dimension`` is ``"requests"``, ``"tokens"``, ``"input_tokens"`` or
    ``"output_tokens"``; ``""`` for a retry hint (Retry-After,
    retry-after-ms), which holds for every dimension. ``limit`` and
    ``remaining`` are -1 when not given (a retry hint has remaining 0);
    ``reset`` is the seconds until the limit is full again (until a retry
    hint ends), 0 when not given, never negative, at most
    ``MAX_PROVIDER_RESET``. ``source`` names the header family: ``openai``,
    ``anthropic``, ``ietf``, ``ratelimit``, ``x-ratelimit``,
    ``retry-after-ms`` or ``retry-after``; ``name`` is the IETF policy's
    name, else ``""``.
    """

    dimension: str
    limit: int
    remaining: int
    reset: float
    source: str
    name: str = ""


class _H:
    """Headers by lower-case name, values in order."""

    def __init__(self, headers: Headers) -> None:
        self.v: Dict[str, List[str]] = {}
        if headers is None:
            return
        if hasattr(headers, "raw") and hasattr(headers.raw, "items") and not isinstance(headers, Mapping):
            headers = headers.raw  # (a fetch-like response object)
        if hasattr(headers, "get_all") and hasattr(headers, "items"):
            pairs = list(headers.items())  # HTTPMessage: repeated names kept by items()
        elif isinstance(headers, Mapping) or hasattr(headers, "items"):
            pairs = []
            for k, v in headers.items():
                if isinstance(v, (list, tuple)):
                    pairs.extend((k, x) for x in v)
                else:
                    pairs.append((k, v))
        else:
            pairs = list(headers)
        for k, v in pairs:
            self.v.setdefault(str(k).lower(), []).append(str(v))

    def get(self, name: str) -> str:
        vs = self.v.get(name.lower())
        return vs[0] if vs else ""

    def values(self, name: str) -> List[str]:
        return self.v.get(name.lower(), [])


def _cap(seconds: float) -> float:
    return min(max(seconds, 0.0), MAX_PROVIDER_RESET)


def _non_neg_int(s: str) -> Optional[int]:
    s = s.strip()
    if not s or len(s) > 15 or not all("0" <= c <= "9" for c in s):
        return None
    return int(s)


def _count(s: str) -> int:
    n = _non_neg_int(s)
    if n is None or n > _MAX_COUNT:
        return -1
    return n


_UNITS = {"ns": 1, "us": 1000, "µs": 1000, "μs": 1000, "ms": 1_000_000, "s": 1_000_000_000,
          "m": 60_000_000_000, "h": 3_600_000_000_000}
_DUR_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def _go_duration(v: str) -> float:
    """A Go-style duration ("6m0s", "1h2m3.5s") in seconds; 0 when
    malformed, signed or beyond a Go duration's range; capped."""
    v = v.strip()
    if not v or v[0] in "+-":
        return 0.0
    if v == "0":
        return 0.0
    total = Fraction(0)
    pos = 0
    while pos < len(v):
        m = _DUR_PART.match(v, pos)
        if not m:
            return 0.0
        total += Fraction(m.group(1) if not m.group(1).endswith(".") else m.group(1)[:-1]) * _UNITS[m.group(2)]
        pos = m.end()
    ns = math.floor(total)
    if ns > _MAX_DURATION_NS:
        return 0.0
    return _cap(ns / 1e9)


_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _rfc3339(v: str) -> Optional[float]:
    """An RFC 3339 time as Unix seconds; None when malformed."""
    m = _RFC3339.match(v.strip())
    if not m:
        return None
    try:
        frac = float(m.group(7)) if m.group(7) else 0.0
        zone = m.group(8)
        if zone == "Z":
            tz = _dt.timezone.utc
        else:
            sign = 1 if zone[0] == "+" else -1
            hh, mm = int(zone[1:3]), int(zone[4:6])
            if hh > 23 or mm > 59:
                return None
            tz = _dt.timezone(sign * _dt.timedelta(hours=hh, minutes=mm))
        t = _dt.datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6)), tzinfo=tz)
    except (ValueError, OverflowError):
        return None
    return t.timestamp() + frac


def parse_retry_after(v: str, now: float) -> Optional[float]:
    """A Retry-After value (delta-seconds or an HTTP-date measured from
    ``now``, Unix seconds) in seconds; None when malformed or negative; a
    date in the past gives 0. Not capped."""
    v = v.strip()
    if not v:
        return None
    if "0" <= v[0] <= "9":
        if not all("0" <= c <= "9" for c in v):
            return None
        return float(min(int(v), _MAX_DURATION_NS // 1_000_000_000))
    try:
        t = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return max(t.timestamp() - now, 0.0)


_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|infinity)$", re.IGNORECASE)


def _retry_after_ms(v: str) -> Optional[float]:
    """retry-after-ms (non-negative milliseconds, a fraction allowed) in
    seconds, capped; None when malformed."""
    v = v.strip()
    if not v or not _FLOAT.match(v):
        return None
    ms = float(v)
    if ms < 0 or ms != ms:
        return None
    if ms >= MAX_PROVIDER_RESET * 1000:
        return MAX_PROVIDER_RESET
    return ms / 1000


def _split_outside_quotes(s: str, sep: str) -> List[str]:
    out, in_quote, esc, start = [], False, False, 0
    for i, c in enumerate(s):
        if esc:
            esc = False
        elif in_quote and c == "\\":
            esc = True
        elif c == '"':
            in_quote = not in_quote
        elif not in_quote and c == sep:
            out.append(s[start:i])
            start = i + 1
    out.append(s[start:])
    return out


def _bare_item(s: str) -> Optional[str]:
    if not s:
        return None
    if s[0] == '"':
        if len(s) < 2 or s[-1] != '"':
            return None
        return s[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if any(c in s for c in ' \t"'):
        return None
    return s


def parse_ratelimit_field(v: str) -> Optional[List[Tuple[str, Dict[str, str]]]]:
    """A RateLimit or RateLimit-Policy structured-field list, as (policy,
    params) pairs; None when it is not a list of items."""
    items = []
    for member in _split_outside_quotes(v, ","):
        member = member.strip()
        if not member:
            return None
        parts = _split_outside_quotes(member, ";")
        name = _bare_item(parts[0].strip())
        if name is None:
            return None
        params: Dict[str, str] = {}
        for p in parts[1:]:
            k, found, val = p.strip().partition("=")
            if not k or any(c in k for c in ' \t"'):
                return None
            if not found:
                val = "?1"
            u = _bare_item(val)
            if u is not None:
                val = u
            params[k] = val
        items.append((name, params))
    return items or None


def _ietf_dimension(name: str) -> str:
    n = name.lower()
    if "input" in n and "token" in n:
        return "input_tokens"
    if "output" in n and "token" in n:
        return "output_tokens"
    if "token" in n:
        return "tokens"
    return "requests"


def _append(out: List[ProviderLimit], l: ProviderLimit, reset_given: bool) -> None:
    if l.limit < 0 and l.remaining < 0 and (not reset_given or l.reset == 0):
        return
    out.append(l)


def _ietf(h: _H) -> List[ProviderLimit]:
    policies: Dict[str, int] = {}
    for v in h.values("RateLimit-Policy"):
        for name, params in parse_ratelimit_field(v) or []:
            q = _count(params.get("q", ""))
            if q >= 0:
                policies[name] = q
    out: List[ProviderLimit] = []
    seen: List[str] = []
    for v in h.values("RateLimit"):
        for name, params in parse_ratelimit_field(v) or []:
            rem = _count(params.get("r", ""))
            t = _non_neg_int(params.get("t", ""))
            reset = _cap(float(t)) if t is not None else 0.0
            if rem >= 0 or reset > 0:
                out.append(ProviderLimit(_ietf_dimension(name), policies.get(name, -1), rem, reset, "ietf", name))
                seen.append(name)
    for name in sorted(policies):
        if name not in seen:
            out.append(ProviderLimit(_ietf_dimension(name), policies[name], -1, 0.0, "ietf", name))
    return out


def parse_provider_limits(headers: Headers, now: Optional[float] = None) -> List[ProviderLimit]:
    """The rate-limit headers of any response (a 200 as well as a 429), in
    the families and order of sluice's Go ``httplimit.ParseProviderLimits``:
    OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` (Go
    durations), Anthropic's ``anthropic-ratelimit-*`` (RFC 3339 resets), the
    IETF ``RateLimit`` with ``RateLimit-Policy``, ``RateLimit-*`` and
    ``X-RateLimit-*`` (a reset of 1e9 or more is a Unix time), then
    ``retry-after-ms`` and ``Retry-After``. ``now`` is Unix seconds (default:
    the clock). Malformed values are skipped; it never raises."""
    now = time.time() if now is None else now
    h = _H(headers)
    out: List[ProviderLimit] = []
    for dim in ("requests", "tokens"):
        reset = h.get("x-ratelimit-reset-" + dim)
        _append(out, ProviderLimit(dim, _count(h.get("x-ratelimit-limit-" + dim)), _count(h.get("x-ratelimit-remaining-" + dim)),
                                   _go_duration(reset), "openai"), reset != "")
    for dim, part in (("requests", "requests"), ("tokens", "tokens"), ("input_tokens", "input-tokens"), ("output_tokens", "output-tokens")):
        p = "anthropic-ratelimit-" + part + "-"
        reset = h.get(p + "reset")
        t = _rfc3339(reset)
        _append(out, ProviderLimit(dim, _count(h.get(p + "limit")), _count(h.get(p + "remaining")),
                                   _cap(t - now) if t is not None else 0.0, "anthropic"), reset != "")
    out.extend(_ietf(h))
    for prefix, source in (("ratelimit-", "ratelimit"), ("x-ratelimit-", "x-ratelimit")):
        n = _non_neg_int(h.get(prefix + "reset"))
        reset = 0.0
        if n is not None:
            reset = _cap(n - now) if n >= 1e9 else _cap(float(n))
        _append(out, ProviderLimit("requests", _count(h.get(prefix + "limit")), _count(h.get(prefix + "remaining")), reset, source),
                h.get(prefix + "reset") != "")
    ms = _retry_after_ms(h.get("retry-after-ms"))
    if ms is not None:
        out.append(ProviderLimit("", -1, 0, ms, "retry-after-ms"))
    ra = parse_retry_after(h.get("retry-after"), now)
    if ra is not None:
        out.append(ProviderLimit("", -1, 0, _cap(ra), "retry-after"))
    return out


def retry_hint(headers: Headers, now: Optional[float] = None, max_hint: float = MAX_PROVIDER_RESET) -> Optional[float]:
    """How long a 429 or 503 answer asks the client to wait, in seconds:
    the longest of Retry-After, retry-after-ms, an exhausted IETF RateLimit
    policy's ``t`` and RateLimit-Remaining: 0 with RateLimit-Reset (as the
    Go ``httplimit.RetryHint``); None when none is given. Capped at
    ``max_hint``."""
    now = time.time() if now is None else now
    h = _H(headers)
    best: Optional[float] = None

    def take(d: float) -> None:
        nonlocal best
        best = d if best is None else max(best, d)

    v = h.get("retry-after")
    if v:
        d = parse_retry_after(v, now)
        if d is not None:
            take(d)
    ms = _retry_after_ms(h.get("retry-after-ms"))
    if ms is not None:
        take(ms)
    for v in h.values("RateLimit"):
        for _, params in parse_ratelimit_field(v) or []:
            r, t = _non_neg_int(params.get("r", "")), _non_neg_int(params.get("t", ""))
            if r == 0 and t is not None:
                take(float(t))
    if _non_neg_int(h.get("ratelimit-remaining")) == 0:
        t = _non_neg_int(h.get("ratelimit-reset"))
        if t is not None:
            take(float(t))
    if best is None:
        return None
    return min(max(best, 0.0), max_hint)
