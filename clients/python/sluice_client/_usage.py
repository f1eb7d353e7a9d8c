"""A model call's usage in a request: ``usage_estimate`` (check, reserve,
acquire) and ``usage`` (settle), checked before they are sent."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

# The fields each takes: the model's name and whole numbers of tokens.
_FIELDS = {
    "usage_estimate": ("input_tokens", "max_output_tokens"),
    "usage": ("input_tokens", "output_tokens", "cached_input_tokens"),
}


def usage_fields(kind: str, value: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The body fields of a usage estimate or a usage (``kind``): ``{}``
    for None, else ``{kind: {...}}`` with ``model`` (a non-empty string)
    and the token counts given (non-negative whole numbers). The service
    prices it exactly: spend on every ``unit: usd`` limit, tokens on token
    limits (``ValueError`` here for a malformed one, ``BadRequest`` with
    code ``unknown_model`` there for a model the policy has no price for)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{kind} must be a mapping with model and token counts")
    model = value.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError(f"{kind} needs a model (a non-empty string)")
    out: Dict[str, Any] = {"model": model}
    for k, v in value.items():
        if k == "model":
            continue
        if k not in _FIELDS[kind]:
            raise ValueError(f"{kind}: unknown field {k!r} (want model, {', '.join(_FIELDS[kind])})")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{kind}[{k!r}] must be a non-negative whole number, not {v!r}")
        out[k] = v
    return {kind: out}
