"""The Python client's override methods against a real ``sluice serve``."""

from __future__ import annotations

import asyncio
import time
import unittest
from datetime import datetime, timedelta, timezone

from sluice_client import AsyncClient, BadRequest, Client, EffectiveLimit, Override, OverridePage, Resolution, Unauthorized

from ._serve import Serve

POLICY = """limits:
  - name: tenant_api
    key: "tenant:{tenant}"
    capacity: 10
    refill_per_second: 1
  - name: per_route
    key: "route:{route}"
    algorithm: sliding_window
    limit: 5
    window: 1m
"""

# The policy file's own override of tenant_api for tenant "pinned".
PINNED = POLICY + """overrides:
  - name: tenant_api
    match: {tenant: pinned}
    capacity: 3
"""


def setUpModule() -> None:
    global srv, admin, pinned, capped
    srv = Serve(POLICY)
    admin = Serve(POLICY, "--admin-token-file", Serve.file("adm1n\n"), "--auth-token-file", Serve.file("checks\n"))
    pinned = Serve(PINNED)
    capped = Serve(POLICY, "--max-overrides", "1")


def tearDownModule() -> None:
    for s in (srv, admin, pinned, capped):
        s.stop()


_n = 0


def tenant() -> str:
    """A fresh tenant, so that tests do not share overrides."""
    global _n
    _n += 1
    return f"t{_n}-{time.monotonic_ns()}"


class SetGetDelete(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(srv.url)

    def test_round_trip(self) -> None:
        t = tenant()
        before = datetime.now(timezone.utc) - timedelta(seconds=1)
        o = self.c.set_override("tenant_api", {"tenant": t}, capacity=500, refill_per_second=50, ttl_s=86400, note="trial")
        self.assertIsInstance(o, Override)
        self.assertEqual((o.name, o.match, o.capacity, o.refill_per_second, o.ttl_s, o.note, o.source),
                         ("tenant_api", {"tenant": t}, 500, 50.0, 86400, "trial", "api"))
        self.assertIsNone(o.refill, "a field not given is the policy's")
        assert o.created_at is not None and o.expires_at is not None
        self.assertGreater(o.created_at, before)
        self.assertAlmostEqual((o.expires_at - o.created_at).total_seconds(), 86400, delta=0.01)
        got = self.c.get_override("tenant_api", {"tenant": t})
        assert got is not None
        self.assertEqual((got.capacity, got.matched_total, got.last_matched_at), (500, 0, None))
        gone = self.c.delete_override("tenant_api", {"tenant": t})
        self.assertEqual((gone.name, gone.match), ("tenant_api", {"tenant": t}))
        self.assertIsNone(self.c.get_override("tenant_api", {"tenant": t}))
        with self.assertRaises(BadRequest) as e:
            self.c.delete_override("tenant_api", {"tenant": t})
        self.assertEqual((e.exception.status, e.exception.code), (404, "not_found"))

    def test_replace_keeps_created_at(self) -> None:
        t = tenant()
        a = self.c.set_override("tenant_api", {"tenant": t}, capacity=5)
        b = self.c.set_override("tenant_api", {"tenant": t}, deny=True, ttl=timedelta(minutes=1))
        self.assertEqual((b.deny, b.capacity, b.ttl_s, b.created_at), (True, None, 60, a.created_at))
        u = self.c.set_override("tenant_api", {"tenant": t}, unlimited=True, shadow=False)
        self.assertEqual((u.unlimited, u.deny, u.shadow, u.expires_at), (True, False, False, None))

    def test_window_fields_and_durations(self) -> None:
        r = tenant()
        o = self.c.set_override("per_route", {"route": r}, limit=50, window=120, block_for=timedelta(minutes=10), shadow=True)
        self.assertEqual((o.limit, o.window, o.block_for, o.shadow), (50, 120.0, 600.0, True))
        o = self.c.set_override("per_route", {"route": r}, window="1h30m", block_for=1.5)
        self.assertEqual((o.limit, o.window, o.block_for), (None, 5400.0, 1.5))
        o = self.c.set_override("tenant_api", {"tenant": r}, refill="100/m")
        self.assertEqual(o.refill, "100/m")


class ListAndResolve(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(srv.url)

    def test_pages(self) -> None:
        p = "p" + tenant() + "_"
        names = sorted(p + str(i) for i in range(5))
        for n in names:
            self.c.set_override("tenant_api", {"tenant": n}, capacity=7)
        page = self.c.list_overrides("tenant_api", n=2)
        self.assertIsInstance(page, OverridePage)
        self.assertEqual(len(page.overrides), 2)
        self.assertIsNotNone(page.next_cursor)
        mine = [o.match["tenant"] for o in self.c.iter_overrides("tenant_api", n=2) if o.match["tenant"].startswith(p)]
        self.assertEqual(mine, names, "every page, in canonical-match order")
        one = self.c.list_overrides("tenant_api", {"tenant": names[3]})
        self.assertEqual(([o.match for o in one.overrides], one.next_cursor), ([{"tenant": names[3]}], None))
        self.assertEqual(self.c.list_overrides("tenant_api", {"tenant": p + "*"}).overrides, [], "a filter is exact, not a pattern")

    def test_resolve_precedence(self) -> None:
        t = tenant()
        c = self.c
        c.set_override("tenant_api", {"tenant": "*"}, capacity=2)
        try:
            c.set_override("tenant_api", {"tenant": t[:3] + "*"}, capacity=3)
            c.set_override("tenant_api", {"tenant": t[:5] + "*"}, capacity=4)
            c.set_override("tenant_api", {"tenant": t}, capacity=5)
            r = c.resolve("tenant_api", {"tenant": t})
            self.assertIsInstance(r, Resolution)
            assert r.override is not None and isinstance(r.effective, EffectiveLimit)
            self.assertEqual((r.source, r.applies, r.override.match, r.effective.capacity), ("override", True, {"tenant": t}, 5))
            self.assertEqual(c.resolve("tenant_api", {"tenant": t + "x"}).effective.capacity, 4, "the longer prefix")  # type: ignore[union-attr]
            self.assertEqual(c.resolve("tenant_api", {"tenant": t[:4] + "-"}).effective.capacity, 3)  # type: ignore[union-attr]
            self.assertEqual(c.resolve("tenant_api", {"tenant": "zzz" + t}).effective.capacity, 2, "* last")  # type: ignore[union-attr]
        finally:
            c.delete_override("tenant_api", {"tenant": "*"})
        r = c.resolve("tenant_api", {"tenant": "zzz" + t})
        self.assertEqual((r.source, r.override, r.effective.capacity), ("policy_limit", None, 10))  # type: ignore[union-attr]
        r = c.resolve("tenant_api", {"route": "x"})
        self.assertEqual((r.source, r.applies), ("none", False))
        d = c.set_override("tenant_api", {"tenant": t + "d"}, deny=True)
        self.assertTrue(d.deny)
        r = c.resolve("tenant_api", {"tenant": t + "d"})
        self.assertTrue(r.effective is not None and r.effective.deny)


class Checks(unittest.TestCase):
    def test_checks_follow_overrides(self) -> None:
        c = Client(srv.url)
        t = tenant()
        c.set_override("tenant_api", {"tenant": t}, capacity=2)
        self.assertEqual([c.check({"tenant": t}).allowed for _ in range(3)], [True, True, False], "the override's capacity, not the policy's 10")
        c.set_override("tenant_api", {"tenant": t}, deny=True)
        d = c.check({"tenant": t})  # (a deny is a refusal: the refused decision, not an error)
        self.assertEqual((d.allowed, d.denied, d.limits[0].denied), (False, True, True))
        c.delete_override("tenant_api", {"tenant": t})
        listed = c.list_overrides("tenant_api", {"tenant": t}).overrides
        self.assertEqual(listed, [])
        c.set_override("tenant_api", {"tenant": t}, unlimited=True)
        self.assertTrue(all(c.check({"tenant": t}, cost=10).allowed for _ in range(5)))
        o = c.get_override("tenant_api", {"tenant": t})
        assert o is not None and o.last_matched_at is not None
        self.assertEqual(o.matched_total, 5)


class Errors(unittest.TestCase):
    def test_service_errors(self) -> None:
        c = Client(srv.url)
        for call, status, code in (
            (lambda: c.set_override("nope", {"tenant": "a"}, capacity=1), 404, "unknown_limit"),
            (lambda: c.set_override("tenant_api", {"tenant": "a"}, limit=5), 422, "kind_mismatch"),
            (lambda: c.set_override("tenant_api", {"route": "a"}, capacity=5), 422, "unknown_descriptor"),
            (lambda: c.set_override("tenant_api", {"tenant": "a*b"}, capacity=5), 400, "bad_request"),
            (lambda: c.set_override("tenant_api", {"tenant": "a"}, deny=True, capacity=5), 400, "bad_request"),
            (lambda: c.set_override("tenant_api", {"tenant": "a"}, capacity=0), 400, "bad_request"),
            (lambda: c.set_override("per_route", {"route": "a"}, window="soon"), 400, "bad_request"),
            (lambda: c.list_overrides("nope"), 404, "unknown_limit"),
            (lambda: c.resolve("nope", {"tenant": "a"}), 404, "unknown_limit"),
            (lambda: Client(pinned.url).set_override("tenant_api", {"tenant": "pinned"}, capacity=9), 409, "policy_override"),
            (lambda: Client(pinned.url).delete_override("tenant_api", {"tenant": "pinned"}), 409, "policy_override"),
        ):
            with self.assertRaises(BadRequest, msg=code) as e:
                call()
            self.assertEqual((e.exception.status, e.exception.code), (status, code))
            self.assertTrue(e.exception.message.startswith("sluice: "), e.exception.message)
        p = Client(pinned.url).get_override("tenant_api", {"tenant": "pinned"})
        self.assertEqual((p.source, p.capacity) if p else None, ("policy", 3))
        cap = Client(capped.url)
        cap.set_override("tenant_api", {"tenant": "one"}, capacity=1)
        with self.assertRaises(BadRequest) as e:
            cap.set_override("tenant_api", {"tenant": "two"}, capacity=1)
        self.assertEqual((e.exception.status, e.exception.code), (422, "too_many_overrides"))

    def test_admin_token(self) -> None:
        with self.assertRaises(Unauthorized):
            Client(admin.url).list_overrides("tenant_api")
        with self.assertRaises(Unauthorized, msg="the checks' token is not the admin's"):
            Client(admin.url, token="checks").set_override("tenant_api", {"tenant": "a"}, capacity=1)
        o = Client(admin.url, token="adm1n").set_override("tenant_api", {"tenant": "a"}, capacity=1)
        self.assertEqual(o.capacity, 1)

    def test_bad_arguments_raise_before_sending(self) -> None:
        c = Client("http://127.0.0.1:1")  # nothing listens: only a ValueError can come first
        for kw in ({"capacity": "5"}, {"capacity": True}, {"capacity": 1.5}, {"refill_per_second": "5"}, {"ttl": 1.5},
                   {"ttl": 60, "ttl_s": 60}, {"window": -1}, {"window": ""}, {"block_for": timedelta(0)}, {"deny": 1},
                   {"note": 5}):
            with self.assertRaises(ValueError, msg=str(kw)):
                c.set_override("tenant_api", {"tenant": "a"}, **kw)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            c.set_override("tenant_api", {"tenant": "a"}, capacty=5)  # type: ignore[call-arg]
        for bad in (["tenant"], {"tenant": None}, {"": "a"}):
            with self.assertRaises(ValueError, msg=str(bad)):
                c.set_override("tenant_api", bad)  # type: ignore[arg-type]
        for n in (0, 1001, True):
            with self.assertRaises(ValueError):
                c.list_overrides("tenant_api", n=n)
        with self.assertRaises(ValueError):
            c.resolve("tenant_api", {})
        with self.assertRaises(ValueError):
            c.delete_override("", {})


class Async(unittest.TestCase):
    def test_async_mirrors(self) -> None:
        async def main() -> None:
            c = AsyncClient(srv.url)
            t = tenant()
            o = await c.set_override("tenant_api", {"tenant": t}, capacity=42, note="async")
            self.assertEqual((o.capacity, o.note), (42, "async"))
            page = await c.list_overrides("tenant_api", {"tenant": t})
            self.assertEqual([x.capacity for x in page.overrides], [42])
            self.assertEqual([x.match async for x in c.iter_overrides("tenant_api", {"tenant": t})], [{"tenant": t}])
            got = await c.get_override("tenant_api", {"tenant": t})
            self.assertEqual(got.capacity if got else None, 42)
            r = await c.resolve("tenant_api", {"tenant": t})
            self.assertEqual(r.effective.capacity if r.effective else None, 42)
            await c.delete_override("tenant_api", {"tenant": t})
            with self.assertRaises(BadRequest):
                await c.delete_override("tenant_api", {"tenant": t})
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
