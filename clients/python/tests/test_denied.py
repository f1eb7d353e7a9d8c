"""A check refused by a deny override, against a real ``sluice serve``: a
refusal (``denied`` True), not a bad request."""

from __future__ import annotations

import asyncio
import unittest

from sluice_client import AsyncClient, Client, RateLimited

from ._serve import Serve

POLICY = """limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: login
    key: "user:{user}"
    capacity: 1
    refill_per_second: 1
    block_for: 10m
overrides:
  - name: tenant_api
    match: {tenant: blocked}
    deny: true
"""


def setUpModule() -> None:
    global srv
    srv = Serve(POLICY)


def tearDownModule() -> None:
    srv.stop()


class Denied(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(srv.url)

    def test_check_returns_the_refusal(self) -> None:
        d = self.c.check({"tenant": "blocked"})
        self.assertEqual((d.allowed, d.denied, d.lease), (False, True, None))
        self.assertEqual([(l.name, l.allowed, l.denied) for l in d.limits], [("tenant_api", False, True)])
        ok = self.c.check({"tenant": "acme"})
        self.assertEqual((ok.allowed, ok.denied, ok.limits[0].denied), (True, False, False))

    def test_blocked(self) -> None:
        self.assertEqual([(d.allowed, d.limits[0].blocked) for d in (self.c.check({"user": "eve"}) for _ in range(2))],
                         [(True, False), (False, True)])

    def test_reserve_and_acquire_raise_rate_limited_denied(self) -> None:
        for call in (self.c.reserve, self.c.acquire):
            with self.assertRaises(RateLimited) as e:
                call({"tenant": "blocked"}, max_wait=1)
            self.assertEqual((e.exception.denied, e.exception.status, e.exception.code, e.exception.retry_after), (True, 403, "denied", 0))
        r = self.c.reserve({"tenant": "acme"}, max_wait=1)
        r.cancel()

    def test_async(self) -> None:
        async def run() -> None:
            a = AsyncClient(srv.url)
            d = await a.check({"tenant": "blocked"})
            self.assertTrue(d.denied)
            with self.assertRaises(RateLimited) as e:
                await a.acquire({"tenant": "blocked"}, max_wait=1)
            self.assertTrue(e.exception.denied)
        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
