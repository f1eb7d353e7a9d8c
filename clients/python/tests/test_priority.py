"""Priority classes against a real ``sluice serve``: ``priority=`` names
the request's class (docs/behaviour.md section 7)."""

from __future__ import annotations

import time
import unittest

from sluice_client import BadRequest, Client, FairShare, RateLimited

from ._serve import Serve

POLICY = """
priorities:
  - name: interactive
  - name: batch
    reserve: 0.5
    max_queue_ms: 0
limits:
  - name: api
    key: "user:{user}"
    capacity: 10
    refill_per_second: 0.001
  - name: provider_tpm
    key: "provider:{provider}"
    capacity: 10
    refill_per_second: 0.01
    fair_share: {by: tenant, weights: {acme: 3}, active_window: 1h}
"""


def setUpModule() -> None:
    global srv
    srv = Serve(POLICY)


def tearDownModule() -> None:
    srv.stop()


class Priority(unittest.TestCase):
    def test_classes(self) -> None:
        """batch stops at its half of the bucket; interactive takes the
        rest; an unknown class is BadRequest unknown_priority."""
        c = Client(srv.url)
        u = {"user": f"u{time.monotonic_ns()}"}
        d = c.check(u, cost=5, priority="batch")
        self.assertTrue(d.allowed)
        self.assertEqual(d.priority, "batch")
        self.assertEqual(d.limits[0].tokens_remaining, 0)
        self.assertEqual((d.limits[0].priority, d.limits[0].retry_after), ("batch", 0))
        r = c.check(u, cost=1, priority="batch")
        self.assertFalse(r.allowed)
        self.assertGreater(r.limits[0].retry_after, 0)
        self.assertGreater(r.limits[0].reset_after, 0)
        d = c.check(u, cost=5, priority="interactive")
        self.assertTrue(d.allowed)
        self.assertEqual(d.priority, "interactive")
        with self.assertRaises(BadRequest) as e:
            c.check(u, cost=1, priority="bulk")
        self.assertEqual(e.exception.code, "unknown_priority")
        with self.assertRaises(ValueError):
            c.check(u, priority="")

    def test_acquire(self) -> None:
        """acquire takes the class too: batch's line is max_queue_ms 0, so
        past its half of the bucket it is refused at once, and
        interactive still gets the rest."""
        c = Client(srv.url)
        u = {"user": f"a{time.monotonic_ns()}"}
        with c.acquire(u, cost=5, max_wait=1, priority="batch"):
            pass
        with self.assertRaises(RateLimited):
            with c.acquire(u, cost=1, max_wait=1, priority="batch"):
                pass
        with c.acquire(u, cost=5, max_wait=1, priority="interactive"):
            pass

    def test_fair_share(self) -> None:
        """Descriptors {provider, tenant}: while the bucket is contended (below
        half), a tenant is held to its weighted share; the status's
        fair_share says whose share, its weight, and a refusal by it."""
        c = Client(srv.url)
        p = f"p{time.monotonic_ns()}"

        def ask(tenant: str, cost: int) -> "tuple":
            d = c.check({"provider": p, "tenant": tenant}, cost=cost)
            return d.allowed, d.limits[0].fair_share
        self.assertEqual(ask("zed", 1), (True, FairShare("zed", 1)))  # uncontended: 9 left
        self.assertEqual(ask("acme", 5), (True, FairShare("acme", 3)))  # 4 left: contended
        self.assertEqual(ask("zed", 1), (True, FairShare("zed", 1)))  # zed's share (1 of 4 of the weight): once
        self.assertEqual(ask("zed", 1), (False, FairShare("zed", 1, refused=True)))  # not twice
        for _ in range(3):
            self.assertEqual(ask("acme", 1), (True, FairShare("acme", 3)))  # acme (3 of 4) takes the rest
        self.assertEqual(ask("acme", 1), (False, FairShare("acme", 3)))  # the bucket's refusal, not the share's
        self.assertIsNone(c.check({"user": p}, cost=0).limits[0].fair_share)

    def test_limited(self) -> None:
        """limited takes the class (and a usage estimate) as acquire does."""
        c = Client(srv.url)
        u = {"user": f"l{time.monotonic_ns()}"}

        @c.limited(u, cost=5, max_wait=1, priority="batch")
        def batch() -> str:
            return "ok"

        @c.limited(u, cost=5, max_wait=1, priority="interactive")
        async def interactive() -> str:
            return "ok"
        self.assertEqual(batch(), "ok")
        with self.assertRaises(RateLimited):
            batch()  # past batch's half of the bucket
        import asyncio
        self.assertEqual(asyncio.run(interactive()), "ok")
        with self.assertRaises(BadRequest):
            c.limited(u, priority="bulk")(lambda: None)()


if __name__ == "__main__":
    unittest.main()
