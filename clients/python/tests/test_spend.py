"""usage_estimate and usage against a real ``sluice serve``: spend
reserved before a call, settled from its usage."""

from __future__ import annotations

import threading
import time
import unittest

from sluice_client import AsyncClient, BadRequest, Client

from ._serve import Serve

SPEND_POLICY = """
prices:
  gpt-4o: {input: 2.50, output: 10.00, cached_input: 1.25}
limits:
  - name: tpm
    key: "team:{team}"
    capacity: 1000000
    refill: 1000000/m
    unit: tokens
  - name: budget
    key: "team:{team}"
    algorithm: quota
    period: month
    timezone: Europe/Berlin
    limit: 0.45
    unit: usd
"""

# A long prompt: $0.05 of input and at most $0.05 of output.
LONG = {"model": "gpt-4o", "input_tokens": 20000, "max_output_tokens": 5000}


def setUpModule() -> None:
    global srv
    srv = Serve(SPEND_POLICY)


def tearDownModule() -> None:
    srv.stop()


def team() -> dict:
    return {"team": f"t{time.monotonic_ns()}"}


class Spend(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(srv.url)

    def test_concurrent_budget(self) -> None:
        """5 concurrent long calls against $0.45 admit 4 ($0.40)."""
        t = team()
        got = []
        lock = threading.Lock()

        def call() -> None:
            d = Client(srv.url).check(t, usage_estimate=LONG)
            with lock:
                got.append(d)
        threads = [threading.Thread(target=call) for _ in range(5)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        admitted = [d for d in got if d.allowed]
        self.assertEqual(len(admitted), 4)
        spent = sum({l.name: l for l in d.limits}["budget"].token_cost for d in admitted)
        self.assertEqual(spent, 400000, "micro-dollars reserved")

    def test_settle_usage(self) -> None:
        t = team()
        d = self.c.check(t, usage_estimate=LONG)
        self.assertEqual({l.name: l for l in d.limits}["budget"].token_cost, 100000)
        # 10,000 of 20,000 input tokens cached, 1,000 output: $0.0475.
        self.c.settle(d.lease, usage={"model": "gpt-4o", "input_tokens": 20000, "cached_input_tokens": 10000, "output_tokens": 1000})
        p = self.c.check(t, cost=0)
        by = {l.name: l for l in p.limits}
        self.assertEqual(by["budget"].tokens_remaining, 450000 - 47500)
        self.assertEqual(by["tpm"].tokens_remaining // 1000, (1000000 - 21000) // 1000)  # (refilling)
        tk = self.c.acquire(t, usage_estimate=LONG, max_wait=1)
        with tk:
            tk.settle(usage={"model": "gpt-4o", "input_tokens": 200000, "output_tokens": 10000}, release=True)  # $0.60: into debt
        self.assertFalse(self.c.check(t).allowed, "spent beyond the budget: refused until the month ends")

    def test_stats_spend(self) -> None:
        """stats() shows the usd limit's unit and the spend this instance
        admitted, corrected by settles; a token limit has no spend."""
        before = self.c.stats().limit("budget")
        assert before is not None
        self.assertEqual((before.unit, before.algorithm, before.capacity), ("usd", "quota", 450000))
        d = self.c.check(team(), usage_estimate=LONG)  # $0.10 reserved
        self.c.settle(d.lease, usage={"model": "gpt-4o", "input_tokens": 20000, "output_tokens": 1000})  # $0.06
        after = self.c.stats().limit("budget")
        assert after is not None and before.spent_micro_usd is not None
        self.assertEqual(after.spent_micro_usd, before.spent_micro_usd + 60000)
        self.assertEqual(after.spent_usd, f"{after.spent_micro_usd / 1e6:.6f}")
        self.assertGreaterEqual(after.admitted_total, before.admitted_total + 1)
        tpm = self.c.stats().limit("tpm")
        assert tpm is not None
        self.assertEqual((tpm.unit, tpm.spent_micro_usd, tpm.spent_usd), ("tokens", None, None))
        self.assertIsNone(self.c.stats().limit("nope"))

    def test_limited(self) -> None:
        """limited reserves the estimate's spend on every call (never settled: $0.10 each)."""
        t = team()

        @self.c.limited(t, usage_estimate=LONG, max_wait=1)
        def call() -> None:
            pass
        call()
        call()
        budget = {l.name: l for l in self.c.check(t, cost=0).limits}["budget"]
        self.assertEqual(budget.tokens_remaining, 450000 - 200000)

    def test_unknown_model(self) -> None:
        with self.assertRaises(BadRequest) as e:
            self.c.check(team(), usage_estimate={"model": "gpt-9", "input_tokens": 1})
        self.assertEqual(e.exception.code, "unknown_model")
        with self.assertRaises(ValueError):
            self.c.check(team(), usage_estimate={"input_tokens": 1})
        with self.assertRaises(ValueError):
            self.c.check(team(), usage_estimate={"model": "gpt-4o", "input_tokens": -1})

    def test_async(self) -> None:
        import asyncio

        async def run() -> None:
            ac = AsyncClient(srv.url)
            d = await ac.check(team(), usage_estimate=LONG)
            self.assertTrue(d.allowed)
            await ac.settle(d.lease, usage={"model": "gpt-4o", "input_tokens": 1, "output_tokens": 1})
        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
