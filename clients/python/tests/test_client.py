"""The Python client against a real ``sluice serve``."""

from __future__ import annotations

import asyncio
import contextvars
import os
import socket
import threading
import time
import unittest

from sluice_client import (AsyncClient, BadRequest, Client, CostExceedsCapacity, NoLimitApplies, RateLimited, ServiceUnavailable,
                           SluiceError, Unauthorized)

from sluice_client._client import _ERRORS, _error

from ._serve import Serve

# The policy both clients' tests use.
with open(os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "policy.yaml")) as _f:
    POLICY = _f.read()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def setUpModule() -> None:
    global srv, secured, storeless, envoy
    srv = Serve(POLICY)
    # an Envoy-config service: it decides over gRPC only
    envoy = Serve("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 1}\n", envoy=True)
    secured = Serve(POLICY, "--auth-token-file", Serve.file("s3cret\n"))
    # a store nobody answers on, failing closed: every check is a 503 store_error
    storeless = Serve(POLICY, "--store", f"redis://127.0.0.1:{free_port()}", "--store-timeout", "200ms", "--on-store-error", "fail_closed")


def tearDownModule() -> None:
    srv.stop()
    secured.stop()
    storeless.stop()
    envoy.stop()


_n = 0


def key() -> dict:
    """Descriptors of a fresh api_key, so that tests do not share budgets."""
    global _n
    _n += 1
    return {"api_key": f"k{_n}-{time.monotonic_ns()}"}


class Check(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(srv.url)

    def test_admitted_and_refused(self) -> None:
        k = key()
        d = self.c.check(k, costs={"tpm": 900})
        self.assertTrue(d.allowed)
        self.assertTrue(d.lease)
        by = {l.name: l for l in d.limits}
        self.assertEqual((by["rpm"].capacity, by["rpm"].tokens_remaining), (5, 4))
        self.assertEqual((by["tpm"].capacity, by["tpm"].tokens_remaining), (1000, 100))
        d = self.c.check(k, costs={"tpm": 1000})
        self.assertFalse(d.allowed, "a refusal is a Decision, not an exception")
        self.assertGreater(d.retry_after, 0.3)  # (900 to refill at 1000/s, less what passed since)
        self.assertLessEqual(d.retry_after, 0.9)
        self.assertIsNone(d.lease)
        self.assertFalse({l.name: l for l in d.limits}["tpm"].allowed)

    def test_check_waits(self) -> None:
        k = key()
        self.c.check(k, costs={"tpm": 1000})
        t0 = time.monotonic()
        d = self.c.check(k, costs={"tpm": 500}, max_wait=2)
        self.assertTrue(d.allowed)
        self.assertGreaterEqual(time.monotonic() - t0, 0.45)

    def test_settle_per_limit(self) -> None:
        k = key()
        d = self.c.check(k, costs={"tpm": 900})
        self.c.settle(d.lease, actual_costs={"tpm": 100})  # 800 back
        d2 = self.c.check(k, costs={"tpm": 850})
        self.assertTrue(d2.allowed, "the settle returned the unused 800 tokens exactly")
        with self.assertRaises(BadRequest) as e:
            self.c.settle(d.lease, actual_cost=1)
        self.assertEqual(e.exception.code, "already_settled")

    def test_settle_and_release(self) -> None:
        k = key()
        tool = {"tool": "s" + k["api_key"]}
        d = self.c.check({**k, **tool}, costs={"tpm": 900})
        self.assertFalse(self.c.check(tool).allowed, "one slot, held")
        self.c.settle(d.lease, actual_costs={"tpm": 100}, release=True)  # 800 back and the slot freed, in one call
        self.assertTrue(self.c.check(tool).allowed, "release=True frees the slot")
        self.assertTrue(self.c.check(k, costs={"tpm": 850}).allowed, "and settles: the unused 800 tokens are back")
        t = self.c.acquire({**key(), "tool": "t" + k["api_key"]}, costs={"tpm": 10}, max_wait=1)
        with t:
            t.settle(actual_cost=1, release=True)
        self.assertTrue(self.c.check({"tool": "t" + k["api_key"]}).allowed, "a ticket's settle with release frees its slot")

    def test_release(self) -> None:
        d = self.c.check({"api_key": key()["api_key"], "tool": "t" + key()["api_key"]})
        tool = {"tool": [l.key for l in d.limits if l.name == "calls"][0].split(":", 1)[1]}
        self.assertFalse(self.c.check(tool).allowed, "one slot, held")
        self.c.release(d.lease)
        self.assertTrue(self.c.check(tool).allowed, "released")
        slot = {"tool": "c" + key()["api_key"]}
        self.c.reserve(slot, max_wait=1).cancel()  # a booking of a slot alone: nothing to return but the slot
        self.assertTrue(self.c.check(slot).allowed, "a cancelled slot-only booking frees its slot")


class Reserve(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(srv.url)

    def test_reserve_and_cancel(self) -> None:
        k = key()
        self.c.check(k, costs={"tpm": 1000})
        r = self.c.reserve(k, costs={"tpm": 500}, max_wait=2)
        self.assertGreater(r.wait, 0.4)
        self.assertLessEqual(r.wait, 0.51)
        r.cancel()
        r2 = self.c.reserve(k, costs={"tpm": 500}, max_wait=2)
        self.assertLessEqual(r2.wait, r.wait + 0.01, "a cancelled booking is returned exactly: the next one is due no later")
        with self.assertRaises(RateLimited) as e:
            self.c.reserve(k, costs={"tpm": 1000}, max_wait=0.2)
        self.assertGreater(e.exception.retry_after, 0.2)

    def test_acquire_sleeps_and_releases(self) -> None:
        k = dict(key(), tool="t" + key()["api_key"])
        self.c.check({"api_key": k["api_key"]}, costs={"tpm": 1000})
        t0 = time.monotonic()
        with self.c.acquire(k, costs={"tpm": 300}, max_wait=2) as t:
            self.assertGreaterEqual(time.monotonic() - t0, 0.28)
            self.assertFalse(self.c.check({"tool": k["tool"]}).allowed, "the slot is held inside the block")
            t.settle(actual_costs={"tpm": 0})
        self.assertTrue(self.c.check({"tool": k["tool"]}).allowed, "released on exit")
        with self.assertRaises(ZeroDivisionError):
            with self.c.acquire({"tool": k["tool"] + "x"}, max_wait=1):
                1 / 0
        self.assertTrue(self.c.check({"tool": k["tool"] + "x"}).allowed, "released on an exception too")

    def test_keyboard_interrupt_cancels_the_booking(self) -> None:
        import _thread
        # tpm refills 1,000/s: the check empties it, the first booking is
        # due 1 s later and the interrupted one 2 s later, so the
        # interrupt (0.2 s in) lands in the sleep even on a slow machine.
        # A process started in the background by a shell without job
        # control inherits SIGINT ignored, and interrupt_main then does
        # nothing: Python's own handler is put back for the test.
        import signal
        self.addCleanup(signal.signal, signal.SIGINT, signal.signal(signal.SIGINT, signal.default_int_handler))
        k = key()
        t0 = time.monotonic()
        self.c.check(k, costs={"tpm": 1000})
        first = self.c.reserve(k, costs={"tpm": 1000}, max_wait=5)
        threading.Timer(0.2, _thread.interrupt_main).start()
        with self.assertRaises(KeyboardInterrupt):
            self.c.acquire(k, costs={"tpm": 1000}, max_wait=5)  # sleeps ~2 s
        r = self.c.reserve(k, costs={"tpm": 1000}, max_wait=5)
        due = 2.0 - (time.monotonic() - t0)  # where the cancelled booking was
        self.assertLessEqual(r.wait, due + 0.5, "the interrupted booking came back: the next one is due where it was, not 1 s later")
        r.cancel()
        first.cancel()

    def test_decorator(self) -> None:
        k = key()
        calls = []

        @self.c.limited(k, costs={"tpm": 400}, max_wait=3)
        def ask(x: int) -> int:
            calls.append(time.monotonic())
            return x * 2

        self.assertEqual([ask(i) for i in range(3)], [0, 2, 4])
        self.assertGreaterEqual(calls[2] - calls[0], 0.15, "1000 tokens/s: the third 400 waits")

        @self.c.limited(k, costs={"tpm": 400}, max_wait=3)
        async def aask(x: int) -> int:
            return x + 1

        self.assertEqual(asyncio.run(aask(1)), 2)


class Pause(unittest.TestCase):
    def test_pause_seen_by_another_client(self) -> None:
        a, b = Client(srv.url), Client(srv.url)
        k = key()
        until = a.pause(k, 2)
        self.assertAlmostEqual(until, time.time() + 2, delta=0.5)
        self.assertFalse(b.check(k).allowed, "paused for every client")
        self.assertTrue(b.check(k, max_wait=4).allowed)

    def test_report_response(self) -> None:
        a, b = Client(srv.url), Client(srv.url)
        k = key()
        self.assertIsNone(a.report_response(200, {"x-ratelimit-remaining-tokens": "29000"}, descriptors=k))
        wait = a.report_response(429, {"retry-after-ms": "1500", "Retry-After": "0"}, descriptors=k)
        self.assertEqual(wait, 1.5, "the longest hint")
        self.assertFalse(b.check(k).allowed)
        with a.acquire(k, max_wait=3):
            pass
        wait = a.report_response(200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"})
        self.assertEqual(wait, 1.5, "nothing left with a reset: pause the last acquire's descriptors")
        self.assertFalse(b.check(k).allowed)
        with self.assertRaises(ValueError):  # a thread or task that acquired nothing names no descriptors
            contextvars.Context().run(Client(srv.url).report_response, 429, {"Retry-After": "1"})


class Errors(unittest.TestCase):
    def test_codes(self) -> None:
        c = Client(srv.url)
        with self.assertRaises(CostExceedsCapacity) as e:
            c.check(key(), costs={"tpm": 5000})
        self.assertEqual(e.exception.limit, "tpm")
        with self.assertRaises(BadRequest) as e:
            c.check(key(), costs={"nope": 1})
        self.assertEqual(e.exception.code, "unknown_limit")
        with self.assertRaises(NoLimitApplies) as e:  # a misspelt descriptor: no limit applies
            c.check({"api_kee": "k1"})
        self.assertEqual((e.exception.status, e.exception.code), (422, "no_limit_applies"))
        self.assertIn("did you mean api_key?", e.exception.message)
        self.assertIsInstance(e.exception, BadRequest)
        with self.assertRaises(BadRequest) as e:
            c.settle("no-such-lease", actual_cost=1)
        self.assertEqual((e.exception.status, e.exception.code), (404, "unknown_lease"))
        with self.assertRaises(BadRequest) as e:
            c.pause({"tool": "t"}, 1, limits=["calls"])  # not a token bucket
        self.assertEqual(e.exception.code, "bad_request")
        with self.assertRaises(Unauthorized):
            Client(secured.url).check(key())
        self.assertTrue(Client(secured.url, token="s3cret").check(key()).allowed)
        for bad in ({}, None, "x"):
            with self.assertRaises(ValueError):
                c.check(bad)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            c.check(key(), max_wait=-1)
        with self.assertRaises(ValueError):
            Client("localhost:8080")
        self.assertTrue(issubclass(RateLimited, SluiceError) and issubclass(ServiceUnavailable, SluiceError))
        with self.assertRaises(ServiceUnavailable) as e:
            Client(storeless.url).check(key())
        self.assertEqual((e.exception.status, e.exception.code), (503, "store_error"))

    def test_each_code_its_error(self) -> None:
        c = Client(srv.url)
        with self.assertRaises(BadRequest) as e:  # 64 descriptors of 1 KiB: over --max-body (64 KiB)
            c.check({f"d{i}": "v" * 1024 for i in range(64)})
        self.assertEqual((e.exception.status, e.exception.code), (413, "body_too_large"))
        with self.assertRaises(BadRequest) as e:  # a base URL with a path no endpoint has
            Client(srv.url + "/nope").check(key())
        self.assertEqual((e.exception.status, e.exception.code), (404, "not_found"))
        with self.assertRaises(BadRequest) as e:
            Client(envoy.url).check(key())
        self.assertEqual((e.exception.status, e.exception.code), (404, "no_policy"))
        # The answers no service here gives: by the map, whatever their status; a code not in it by its status.
        for status, code, cls in ((500, "bad_answer", SluiceError), (500, "bad_receipt", SluiceError), (503, "retry", ServiceUnavailable),
                                  (404, "receipt_dropped", BadRequest), (422, "request_id_mismatch", BadRequest),
                                  (503, "store_full", ServiceUnavailable), (503, "a_newer_code", ServiceUnavailable),
                                  (409, "a_newer_code", BadRequest), (500, None, SluiceError), (429, None, RateLimited)):
            err = _error(status, {"error": "x", "code": code}, "")
            self.assertIs(type(err), cls, (status, code))
            self.assertEqual((err.status, err.code, err.message), (status, code or ("rate_limited" if status == 429 else None), "sluice: x"))
        self.assertEqual(_error(503, {"code": "store_full", "retry_after_ms": 1500}, "").retry_after, 1.5)  # type: ignore[attr-defined]
        self.assertTrue(all(issubclass(v, SluiceError) for v in _ERRORS.values()))

    def test_bad_arguments_raise_before_sending(self) -> None:
        c = Client(srv.url)
        k = key()
        for kw in ({"cost": 2.9}, {"cost": True}, {"cost": -1}, {"costs": {"tpm": "12"}}, {"costs": {"tpm": float("nan")}},
                   {"max_wait": float("inf")}, {"max_wait": 1e12}):
            with self.assertRaises(ValueError, msg=str(kw)):
                c.check(k, **kw)  # type: ignore[arg-type]
        for bad in ({"api_key": None}, {"api_key": True}, {"": "x"}):
            with self.assertRaises(ValueError, msg=str(bad)):
                c.check(bad)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            c.reserve(k, max_wait=None)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            c.pause(k, 100000)  # more than 24 h
        with self.assertRaises(ValueError):
            c.report_response("429", {}, descriptors=k)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            c.settle("lease", actual_costs={"tpm": 1.5})
        self.assertTrue(Client(secured.url, token="s3cret\n").check(key()).allowed, "a token read from a file, newline and all")

    def test_service_down(self) -> None:
        port = free_port()
        t0 = time.monotonic()
        with self.assertRaises(ServiceUnavailable) as e:
            Client(f"http://127.0.0.1:{port}", timeout=1).check(key())
        self.assertIsNone(e.exception.status)
        self.assertLess(time.monotonic() - t0, 2)

    def test_service_hangs(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # accepts, never answers
        try:
            t0 = time.monotonic()
            with self.assertRaises(ServiceUnavailable):
                Client(f"http://127.0.0.1:{s.getsockname()[1]}", timeout=0.5).check(key())
            self.assertLess(time.monotonic() - t0, 2, "no hang past the timeout")
        finally:
            s.close()


class Concurrent(unittest.TestCase):
    def test_report_response_pauses_the_callers_own_key(self) -> None:
        async def main() -> dict:
            a = AsyncClient(srv.url)
            ka, kb = key(), key()

            async def worker(k: dict, delay: float, status: int) -> None:
                async with await a.acquire(k, max_wait=3):
                    await asyncio.sleep(delay)
                    await a.report_response(status, {"retry-after": "5"})

            await asyncio.gather(worker(ka, 0.2, 429), worker(kb, 0.1, 200))
            sync = Client(srv.url)
            out = {"a": sync.check(ka).allowed, "b": sync.check(kb).allowed}
            tk = sync.acquire(key(), max_wait=1)
            out["ticket"] = tk.report_response(429, {"retry-after": "5"})
            out["ticket_paused"] = not sync.check(tk.descriptors).allowed
            tk.release()
            return out
        out = asyncio.run(main())
        self.assertEqual(out, {"a": False, "b": True, "ticket": 5.0, "ticket_paused": True},
                         "each task's report pauses its own key (the one that got the 429); a ticket names its own")

    def test_async_ticket_needs_async_with(self) -> None:
        async def main() -> None:
            t = await AsyncClient(srv.url).acquire(key(), max_wait=1)
            with self.assertRaises(TypeError):
                with t:  # type: ignore[attr-defined]
                    pass
            await t.release()
        asyncio.run(main())


class Async(unittest.TestCase):
    def test_async_acquire_and_cancel(self) -> None:
        async def main() -> None:
            c = AsyncClient(srv.url)
            sync = Client(srv.url)
            k = key()
            d = await c.check(k, costs={"tpm": 1000})
            self.assertTrue(d.allowed)
            task = asyncio.ensure_future(c.acquire(k, costs={"tpm": 800}, max_wait=3))
            await asyncio.sleep(0.2)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.5)
            r = sync.reserve(k, costs={"tpm": 800}, max_wait=3)
            self.assertLessEqual(r.wait, 0.4, "the cancelled task's booking came back: 800 tokens due 0.8 s after the first check, not 1.6 s")
            r.cancel()
            async with await c.acquire(k, costs={"tpm": 10}, max_wait=3) as t:
                await t.settle(actual_costs={"tpm": 0})
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
