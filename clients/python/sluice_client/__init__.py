"""sluice_client: one rate-limit budget, on a ``sluice serve``, for every
process, thread and task — standard library only.

    from sluice_client import Client

    client = Client("http://127.0.0.1:8080")

    @client.limited({"api_key": "k1"}, costs={"tpm": 800})
    def ask(prompt):
        ...
"""

from ._aclient import AsyncClient, AsyncReservation
from ._client import Client, Decision, Limit, Reservation, Ticket, trace
from ._errors import BadRequest, CostExceedsCapacity, NoLimitApplies, RateLimited, ServiceUnavailable, SluiceError, Unauthorized
from ._headers import MAX_PROVIDER_RESET, ProviderLimit, parse_provider_limits, retry_hint
from ._overrides import EffectiveLimit, Override, OverridePage, Resolution
from ._stats import FairShare, FeedbackStatus, LimitStats, Stats

__all__ = [
    "Client", "AsyncClient", "Decision", "Limit", "Reservation", "AsyncReservation", "Ticket", "trace",
    "SluiceError", "RateLimited", "CostExceedsCapacity", "BadRequest", "NoLimitApplies", "Unauthorized", "ServiceUnavailable",
    "ProviderLimit", "parse_provider_limits", "retry_hint", "MAX_PROVIDER_RESET",
    "Override", "OverridePage", "Resolution", "EffectiveLimit",
    "FairShare", "FeedbackStatus", "Stats", "LimitStats",
]
__version__ = "0.1.0"
