"""near_limit against a real ``sluice serve``: a limit with ``alerts:
[0.5, 1.0]`` marks its status, and the decision, once a key's use reaches
half of it (the lowest alert below 1)."""

from __future__ import annotations

import asyncio
import time
import unittest

from sluice_client import AsyncClient, Client

from ._serve import Serve

POLICY = """
limits:
  - name: daily
    key: "user:{user}"
    algorithm: quota
    period: day
    limit: 4
    alerts: [0.5, 1.0]
  - name: burst
    key: "user:{user}"
    capacity: 100
    refill_per_second: 0.001
"""


def setUpModule() -> None:
    global srv
    srv = Serve(POLICY)


def tearDownModule() -> None:
    srv.stop()


def user() -> dict:
    return {"user": f"u{time.monotonic_ns()}"}


class NearLimit(unittest.TestCase):
    def test_near_limit(self) -> None:
        c, u = Client(srv.url), user()
        got = []
        for _ in range(5):
            d = c.check(u)
            by = {l.name: l for l in d.limits}
            got.append((d.allowed, d.near_limit, by["daily"].near_limit, by["burst"].near_limit))
        self.assertEqual(got, [
            (True, False, False, False),  # 1 of 4 used
            (True, True, True, False),    # 2 of 4: the 0.5 alert reached
            (True, True, True, False),
            (True, True, True, False),    # 4 of 4 (the 1.0 alert: still near)
            (False, True, True, False),   # refused, and still near
        ])
        self.assertEqual({l.name: l for l in d.limits}["daily"].period, "day")

    def test_cost_crosses_at_once(self) -> None:
        d = Client(srv.url).check(user(), costs={"daily": 3})
        self.assertTrue(d.allowed)
        self.assertTrue(d.near_limit)
        self.assertEqual([l.name for l in d.limits if l.near_limit], ["daily"])

    def test_async(self) -> None:
        async def run() -> None:
            a, u = AsyncClient(srv.url), user()
            self.assertFalse((await a.check(u)).near_limit)
            self.assertTrue((await a.check(u)).near_limit)
        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
