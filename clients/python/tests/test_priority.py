"""Priority classes against a real ``sluice serve``: ``priority=`` names
the request's class (docs/behaviour.md section 7)."""

from __future__ import annotations

import time
import unittest

from sluice_client import BadRequest, Client, RateLimited

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
