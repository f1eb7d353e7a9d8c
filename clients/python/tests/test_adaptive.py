"""Adaptive limits against a real ``sluice serve``: report_response of a
429 without hints lowers the key's ceiling (POST /v1/feedback), checks
are decided under it."""

from __future__ import annotations

import time
import unittest

from sluice_client import AsyncClient, BadRequest, Client, FeedbackStatus

from ._serve import Serve

ADAPTIVE_POLICY = """
limits:
  - name: tool
    key: "tool:{tool}"
    capacity: 10
    refill_per_second: 100
    adaptive: {min_refill_per_second: 10, increase_per_second: 0.001, cooldown: 1m}
"""


def setUpModule() -> None:
    global srv
    srv = Serve(ADAPTIVE_POLICY)


def tearDownModule() -> None:
    srv.stop()


def tool() -> dict:
    return {"tool": f"t{time.monotonic_ns()}"}


class Adaptive(unittest.TestCase):
    def test_report_response_overload(self) -> None:
        c, d = Client(srv.url), tool()
        self.assertIsNone(c.report_response(200, {}, descriptors=d))
        self.assertIsNone(c.report_response(429, {}, descriptors=d))  # no hint: an overload
        got = c.feedback(d, "ok")
        self.assertEqual(len(got), 1)
        self.assertIsInstance(got[0], FeedbackStatus)
        self.assertEqual((got[0].name, got[0].lowered, got[0].refill_per_second, got[0].min_refill_per_second), ("tool", False, 100, 10))
        self.assertAlmostEqual(got[0].adaptive_refill_per_second, 50, delta=0.01)
        self.assertIsNone(c.report_response(529, {}, descriptors=d))  # within the cooldown: no further drop
        self.assertAlmostEqual(c.feedback(d, "ok")[0].adaptive_refill_per_second, 50, delta=0.01)
        c.check(d)
        dec = c.check(d)
        self.assertAlmostEqual(dec.limits[0].adaptive_refill_per_second or 0, 50, delta=0.01)
        st = c.stats().limit("tool")
        assert st is not None
        self.assertAlmostEqual(st.adaptive_refill_per_second or 0, 50, delta=0.01)

    def test_hint_pauses_instead(self) -> None:
        c, d = Client(srv.url), tool()
        self.assertEqual(c.report_response(429, {"Retry-After": "1"}, descriptors=d), 1)
        self.assertEqual(c.feedback(d, "ok")[0].adaptive_refill_per_second, 100)

    def test_feedback_errors(self) -> None:
        c = Client(srv.url)
        with self.assertRaises(ValueError):
            c.feedback(tool(), "slow")
        with self.assertRaises(BadRequest):
            c.feedback(tool(), "ok", limits=["nope"])

    def test_async(self) -> None:
        import asyncio

        async def run() -> None:
            a, d = AsyncClient(srv.url), tool()
            got = await a.feedback(d, "overloaded")
            self.assertTrue(got[0].lowered)
            self.assertIsNotNone((await a.stats()).limit("tool"))
        asyncio.run(run())
