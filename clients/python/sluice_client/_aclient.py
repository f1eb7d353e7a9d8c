"""The asyncio client: AsyncClient and AsyncReservation, Client's methods as coroutines."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, List, Mapping, Optional

from ._client import Client, Decision, Descriptors, F, Reservation, Ticket, _current, _trace
from ._headers import Headers
from ._overrides import _AsyncOverrides
from ._stats import FeedbackStatus, Stats

__all__ = ["AsyncClient", "AsyncReservation"]


class AsyncClient(_AsyncOverrides):
    """The asyncio client: the methods of Client as coroutines (each HTTP
    call runs in a thread; the waits are asyncio sleeps, so a cancelled task
    cancels its booking)."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 5.0,
                 trace_headers: Optional[Callable[[], Mapping[str, str]]] = None) -> None:
        self._c = Client(url, token, timeout, trace_headers)
        self.url, self.token, self.timeout = self._c.url, token, self._c.timeout

    async def _run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        h = _trace.get()  # (the task's trace context, into the executor's thread)

        def call() -> Any:
            token = _trace.set(h)
            try:
                return fn(*args, **kw)
            finally:
                _trace.reset(token)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def check(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
                    max_wait: Optional[float] = None, usage_estimate: Optional[Mapping[str, Any]] = None, priority: Optional[str] = None) -> Decision:
        """Client.check."""
        return await self._run(self._c.check, descriptors, cost=cost, costs=costs, max_wait=max_wait, usage_estimate=usage_estimate, priority=priority)

    async def reserve(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
                      max_wait: float, usage_estimate: Optional[Mapping[str, Any]] = None, priority: Optional[str] = None) -> "AsyncReservation":
        """Client.reserve. A task cancelled while the booking is on its way
        cancels the booking once it arrives."""
        fut = asyncio.ensure_future(self._run(self._c.reserve, descriptors, cost=cost, costs=costs, max_wait=max_wait, usage_estimate=usage_estimate, priority=priority))
        try:
            r = await asyncio.shield(fut)
        except asyncio.CancelledError:
            def undo(f: "asyncio.Future[Any]") -> None:
                if not f.cancelled() and f.exception() is None:
                    threading.Thread(target=f.result().cancel, daemon=True).start()
            fut.add_done_callback(undo)
            raise
        return AsyncReservation(self, r)

    async def acquire(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
                      max_wait: float, usage_estimate: Optional[Mapping[str, Any]] = None, priority: Optional[str] = None) -> Ticket:
        """Client.acquire (a task cancelled while sleeping cancels the booking); the Ticket is an async context manager."""
        r = await self.reserve(descriptors, cost=cost, costs=costs, max_wait=max_wait, usage_estimate=usage_estimate, priority=priority)
        _current.set(r.descriptors)
        try:
            if r.wait > 0:
                await asyncio.sleep(r.wait)
        except BaseException:
            await r.cancel()
            raise
        return Ticket(self, r.decision, r.descriptors)

    async def settle(self, lease: str, actual_cost: Optional[int] = None, actual_costs: Optional[Mapping[str, int]] = None,
                     release: bool = False, usage: Optional[Mapping[str, Any]] = None) -> None:
        """Client.settle."""
        await self._run(self._c.settle, lease, actual_cost=actual_cost, actual_costs=actual_costs, release=release, usage=usage)

    async def release(self, lease: str) -> None:
        """Client.release."""
        await self._run(self._c.release, lease)

    async def pause(self, descriptors: Descriptors, retry_after: float, limits: Optional[List[str]] = None) -> float:
        """Client.pause."""
        return await self._run(self._c.pause, descriptors, retry_after, limits)

    async def feedback(self, descriptors: Descriptors, outcome: str, limits: Optional[List[str]] = None) -> List[FeedbackStatus]:
        """Client.feedback."""
        return await self._run(self._c.feedback, descriptors, outcome, limits)

    async def stats(self) -> Stats:
        """Client.stats."""
        return await self._run(self._c.stats)

    async def report_response(self, status: int, headers: Headers, *, descriptors: Optional[Descriptors] = None,
                              limits: Optional[List[str]] = None) -> Optional[float]:
        """Client.report_response (by default for this task's last acquire)."""
        d = descriptors if descriptors is not None else _current.get()
        return await self._run(self._c.report_response, status, headers, descriptors=d, limits=limits)

    def limited(self, descriptors: Descriptors, *, cost: Optional[int] = None, costs: Optional[Mapping[str, int]] = None,
                max_wait: float = 3.0, usage_estimate: Optional[Mapping[str, Any]] = None,
                priority: Optional[str] = None) -> Callable[[F], F]:
        """Client.limited (for plain and async functions)."""
        return self._c.limited(descriptors, cost=cost, costs=costs, max_wait=max_wait, usage_estimate=usage_estimate, priority=priority)


class AsyncReservation:
    """Reservation for AsyncClient: ``cancel()`` is a coroutine."""

    def __init__(self, client: AsyncClient, r: Reservation) -> None:
        self._client, self._r = client, r
        self.decision, self.lease, self.wait, self.descriptors = r.decision, r.lease, r.wait, r.descriptors

    async def cancel(self) -> None:
        """Return the booking exactly."""
        await self._client._run(self._r.cancel)
